// conv2d front-ends and their backward node; the forward and the backward algorithms are
// kernels/conv.h.
#include "mixprec/ops/conv.h"

#include <optional>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
#include "op_util.h"

namespace mixprec {
namespace {

kernels::Conv2dOptions kernel_options(const Conv2dParams& p) {
  kernels::Conv2dOptions o;
  o.stride_h = o.stride_w = p.stride;
  o.pad_h = o.pad_w = p.padding;
  o.dilation_h = o.dilation_w = p.dilation;
  o.groups = p.groups;
  return o;
}

const Tensor* optional(const Tensor& t) { return t.defined() ? &t : nullptr; }

kernels::Conv2dOptions with_residual(kernels::Conv2dOptions o, const Tensor* residual) {
  o.residual = residual;
  return o;
}


struct Conv2dBackward final : autograd::Node {
  Tensor x, weight;  // as given (detached)
  Conv2dParams p;
  DType bias_dtype = DType::F32;
  DType residual_dtype = DType::F32;  // with a fused residual (a fourth input)
  std::string_view name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const kernels::Conv2dOptions options = kernel_options(p);
    kernels::Conv2dGrads d;  // the gradients asked for, made here (a graph's record owns them)
    if (next_edges[0].valid()) d.input = Tensor::empty_like(x, MemoryFormat::Preserve);
    if (next_edges[1].valid()) d.weight = Tensor::empty(weight.shape(), weight.dtype());
    if (next_edges[2].valid()) d.bias = Tensor::empty({weight.size(0)}, bias_dtype);
    capture::launch("conv2d_backward", {&x, &weight, &grads[0]},
                    {optional(d.input), optional(d.weight), optional(d.bias)},
                    [options](const capture::KernelArgs& k) {
                      auto given = [&](std::size_t i) {
                        return k.outputs[i] != nullptr ? k.out(i) : Tensor();
                      };
                      kernels::conv2d_backward_into(k.in(0), k.in(1), k.in(2), options,
                                                    {given(0), given(1), given(2)});
                    });
    std::vector<Tensor> out{d.input, d.weight, d.bias};
    if (next_edges.size() > 3)  // a fused residual: d out / d residual = 1
      out.push_back(grads[0].dtype() == residual_dtype ? grads[0] : grads[0].to(residual_dtype));
    return out;
  }
  void release_saved() override { x = weight = Tensor(); }
};

// How conv2d takes a residual of the output's dtype: added in the epilogue (the output's shape),
// folded into the bias (one sample's per-channel offsets [1, O, 1, 1], as a time embedding), or
// else added after the convolution, as add() does (another dtype, or another broadcast), so the
// result's dtype never depends on the path.
enum class ResidualPath { Epilogue, Bias, After };  // Epilogue also when there is none

ResidualPath residual_path(const Tensor& residual, const Shape& out_shape, DType out_dtype) {
  if (!residual.defined()) return ResidualPath::Epilogue;
  ops_detail::check_float("conv2d", residual);
  if (residual.shape() == out_shape)
    return residual.dtype() == out_dtype ? ResidualPath::Epilogue : ResidualPath::After;
  if (out_shape[0] == 1 && residual.shape() == Shape{1, out_shape[1], 1, 1} &&
      residual.dtype() == out_dtype)
    return ResidualPath::Bias;
  return ResidualPath::After;
}

// bias + the residual's per-channel offsets (ResidualPath::Bias).
Tensor bias_plus(const Tensor& bias, const Tensor& residual) {
  const Tensor offsets = residual.reshape({residual.size(1)});
  return bias.defined() ? add(bias, offsets) : offsets;
}

// Both conv2d entries: the result when the residual is not for the epilogue (folded into the
// bias, or added after), else nothing.
template <typename Weight>
std::optional<Tensor> residual_elsewhere(const Tensor& x, const Weight& weight, const Tensor& bias,
                                         const Conv2dParams& p, const Tensor& residual,
                                         const Shape& out_shape) {
  switch (residual_path(residual, out_shape, x.dtype())) {
    case ResidualPath::After: return add(conv2d(x, weight, bias, p), residual);
    case ResidualPath::Bias: return conv2d(x, weight, bias_plus(bias, residual), p);
    case ResidualPath::Epilogue: break;
  }
  return std::nullopt;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dParams& p, const Tensor& residual) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::Conv2d, x_in, weight_in, bias_in);
  ops_detail::check_float("conv2d", x);
  ops_detail::check_float("conv2d", weight);
  MIXPREC_CHECK(x.dim() == 4 && weight.dim() == 4,
                "[conv2d] expected x [N, C, H, W] and weight [O, C/g, KH, KW], got ",
                shape_to_string(x.shape()), " and ", shape_to_string(weight.shape()));
  kernels::Conv2dOptions ko = kernel_options(p);
  MIXPREC_CHECK(p.groups >= 1 && x.size(1) % p.groups == 0 && weight.size(0) % p.groups == 0,
                "[conv2d] groups ", p.groups, " must divide channels ", x.size(1), " and ",
                weight.size(0));
  const Shape out_shape{
      x.size(0), weight.size(0),
      kernels::conv_output_size(x.size(2), weight.size(2), p.stride, p.padding, p.dilation),
      kernels::conv_output_size(x.size(3), weight.size(3), p.stride, p.padding, p.dilation)};
  if (auto routed = residual_elsewhere(x, weight, bias, p, residual, out_shape)) return *routed;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.suggest_memory_format());
  {
    NoGrad no_grad;
    capture::launch("conv2d", {&x, &weight, optional(bias), optional(residual)}, {&out},
                    [ko](const capture::KernelArgs& k) {
                      kernels::conv2d(k.in(0), k.in(1), k.optional(2), k.out(0),
                                      with_residual(ko, k.optional(3)));
                    });
  }
  if (autograd::needs_grad({&x, &weight, &bias, &residual})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = x.detach();
    node->weight = weight.detach();
    node->p = p;
    if (bias.defined()) node->bias_dtype = bias.dtype();
    if (residual.defined()) {
      node->residual_dtype = residual.dtype();
      autograd::record(node, {&x, &weight, &bias, &residual}, {&out});
    } else {
      autograd::record(node, {&x, &weight, &bias}, {&out});
    }
  }
  return out;
}

Tensor conv2d(const Tensor& x_in, std::shared_ptr<const kernels::PackedConvWeights> packed,
              const Tensor& bias_in, const Conv2dParams& p, const Tensor& residual) {
  MIXPREC_CHECK(packed != nullptr, "[conv2d] no packed weights");
  const kernels::PackedConvWeights& weight = *packed;
  const auto [x, bias] = amp::autocast_args(amp::AutocastOp::Conv2d, x_in, bias_in);
  MIXPREC_CHECK(!autograd::needs_grad({&x, &bias, &residual}),
                "[conv2d] packed weights are for inference: x, bias and residual must not need a "
                "gradient");
  ops_detail::check_float("conv2d", x);
  MIXPREC_CHECK(x.dim() == 4 && weight.defined(), "[conv2d] expected x [N, C, H, W] and packed ",
                "weights, got ", shape_to_string(x.shape()));
  const int64_t oh =
      kernels::conv_output_size(x.size(2), weight.shape()[2], p.stride, p.padding, p.dilation);
  const int64_t ow =
      kernels::conv_output_size(x.size(3), weight.shape()[3], p.stride, p.padding, p.dilation);
  const Shape out_shape{x.size(0), weight.shape()[0], oh, ow};
  if (auto routed = residual_elsewhere(x, packed, bias, p, residual, out_shape)) return *routed;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.suggest_memory_format());
  // The kernel, reading x upsampled by `scale` (a graph's fused upsample) when scale > 1.
  const kernels::Conv2dOptions ko = kernel_options(p);
  auto kernel = [packed, ko](int64_t scale) {
    kernels::Conv2dOptions o = ko;
    o.input_scale = scale;
    return [packed, o](const capture::KernelArgs& k) {
      kernels::conv2d(k.in(0), *packed, k.optional(1), k.out(0), with_residual(o, k.optional(2)));
    };
  };
  capture::Fusions fusions;
  if (kernels::conv2d_runs_packed(weight, ko)) {
    fusions.reading_upsampled = [kernel](int64_t scale) { return capture::Kernel(kernel(scale)); };
    fusions.writes_channel_slice = true;
  }
  // An add that follows may become the residual epilogue (input 2) in a graph, and a cast the
  // dtype the kernel writes (the epilogue rounds its f32 sums once into any dtype).
  if (!residual.defined()) fusions.residual_input = 2;
  fusions.writes_any_dtype = true;
  capture::launch("conv2d_packed", {&x, optional(bias), optional(residual)}, {&out}, kernel(1),
                  capture::Aliasing::None, std::move(fusions));
  return out;
}

}  // namespace mixprec
