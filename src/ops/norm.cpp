// Normalisation front-ends and their backward. With xhat = (x - mean) * rstd over one group of
// M elements and gy = dL/dy * weight (the affine scale):
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))     LayerNorm, GroupNorm
//   dx = rstd * (gy - xhat * mean(gy * xhat)), xhat = x rstd  RMSNorm (no centring)
//   dweight = sum(dL/dy * xhat), dbias = sum(dL/dy) over everything but the channel
#include "mixprec/kernels/norm.h"

#include <algorithm>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/norm_backward.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/functional.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::Activation;

enum class NormKind { Layer, Rms, Group };

// The norm kernels' optional operands: a missing one is an undefined tensor.
const Tensor& or_none(const Tensor* t) {
  static const Tensor none;
  return t != nullptr ? *t : none;
}
const Tensor* optional(const Tensor& t) { return t.defined() ? &t : nullptr; }

// The forward's statistics (f32, f64 for f64 x) are kept for the backward, which runs the
// vectorised kernels of kernels/norm_backward.h (dx in x's dtype and layout, one rounding).
struct NormBackward final : autograd::Node {
  NormKind kind;
  Tensor x, weight, bias;
  kernels::NormStats stats;
  Shape normalized_shape;
  int64_t groups = 1;
  Activation activation = Activation::None;
  std::string_view name() const override {
    return kind == NormKind::Layer ? "LayerNormBackward"
           : kind == NormKind::Rms ? "RMSNormBackward"
                                   : "GroupNormBackward";
  }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    kernels::NormGrads out;
    if (next_edges[0].valid()) out.dx = Tensor::empty_like(x, MemoryFormat::Preserve);
    if (weight.defined() && next_edges[1].valid()) out.dweight = Tensor::empty_like(weight);
    if (bias.defined() && next_edges.size() > 2 && next_edges[2].valid())
      out.dbias = Tensor::empty_like(bias);
    // One kernel for the graph's record, every tensor an argument (the node's own members are
    // released after the backward; the closure holds only options).
    capture::launch(
        kind == NormKind::Layer ? "layer_norm_backward"
        : kind == NormKind::Rms ? "rms_norm_backward"
                                : "group_norm_backward",
        {&x, &grads[0], optional(weight), optional(bias), optional(stats.mean),
         optional(stats.rstd)},
        {optional(out.dx), optional(out.dweight), optional(out.dbias)},
        [kind = kind, groups = groups, activation = activation,
         normalized_shape = normalized_shape](const capture::KernelArgs& k) {
          const kernels::NormStats st{or_none(k.optional(4)), or_none(k.optional(5))};
          kernels::NormGrads o{or_none(k.outputs[0]), or_none(k.outputs[1]),
                               or_none(k.outputs[2])};
          if (kind == NormKind::Group)
            kernels::group_norm_backward(k.in(0), k.in(1), groups, or_none(k.optional(2)),
                                         or_none(k.optional(3)), activation, st, o);
          else
            kernels::layer_norm_backward(k.in(0), k.in(1), normalized_shape,
                                         or_none(k.optional(2)), kind == NormKind::Rms, st, o);
        });
    return {out.dx, out.dweight, out.dbias};
  }
  void release_saved() override {
    x = weight = bias = Tensor();
    stats = {};
  }
};

// Statistics tensors for a forward whose backward will need them: [lead] in f32 (f64 for f64).
kernels::NormStats make_stats(const Tensor& x, const Shape& lead, bool with_mean) {
  const DType t = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  return {with_mean ? Tensor::empty(lead, t) : Tensor(), Tensor::empty(lead, t)};
}

bool norm_needs_grad(const Tensor& x, const Tensor& w, const Tensor& b) {
  return autograd::needs_grad({&x, &w, &b});
}


// A norm kernel's launch: inputs x, weight, bias; outputs out and, for a backward, the stats.
template <class Run>
capture::Kernel norm_kernel(Run run) {
  return [run](const capture::KernelArgs& k) {
    const Tensor &x = k.in(0), &w = or_none(k.optional(1)), &b = or_none(k.optional(2));
    if (k.outputs[1] == nullptr && k.outputs[2] == nullptr) {
      static const kernels::NormStats none;  // inference: no stats, no copies
      run(x, w, b, k.out(0), none);
    } else {  // rms_norm keeps no mean
      run(x, w, b, k.out(0), kernels::NormStats{or_none(k.outputs[1]), or_none(k.outputs[2])});
    }
  };
}

template <class Run>
void launch_norm(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                 const Tensor& out, const kernels::NormStats& stats, Run run,
                 capture::Fusions fusions = {}) {
  fusions.writes_any_dtype = true;  // the write pass rounds once into the output's dtype
  capture::launch(op, {&x, optional(weight), optional(bias)},
                  {&out, optional(stats.mean), optional(stats.rstd)}, norm_kernel(run),
                  capture::Aliasing::FirstInput, std::move(fusions));
}

Tensor record_norm(Tensor out, std::shared_ptr<NormBackward> node, const Tensor& x, const Tensor& w,
                   const Tensor& b) {
  if (norm_needs_grad(x, w, b)) {
    node->x = x.detach();
    node->weight = w.detach();
    node->bias = b.detach();
    autograd::record(node, {&x, &w, &b}, {&out});
  }
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::LayerNorm, x_in, weight_in, bias_in);
  ops_detail::check_float("layer_norm", x);
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  auto node = std::make_shared<NormBackward>();
  const auto nd = std::min<int64_t>(x.dim(), static_cast<int64_t>(normalized_shape.size()));
  if (norm_needs_grad(x, weight, bias))
    node->stats = make_stats(x, Shape(x.shape().begin(), x.shape().end() - nd), true);
  {
    NoGrad no_grad;
    launch_norm("layer_norm", x, weight, bias, out, node->stats,
                [normalized_shape, eps](const Tensor& x, const Tensor& w, const Tensor& b,
                                        const Tensor& o, const kernels::NormStats& s) {
                  kernels::layer_norm(x, normalized_shape, w, b, eps, o, s);
                });
  }
  node->kind = NormKind::Layer;
  node->normalized_shape = normalized_shape;
  return record_norm(out, node, x, weight, bias);
}

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                double eps) {
  const auto [x, weight] = amp::autocast_args(amp::AutocastOp::RMSNorm, x_in, weight_in);
  ops_detail::check_float("rms_norm", x);
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  auto node = std::make_shared<NormBackward>();
  const auto nd = std::min<int64_t>(x.dim(), static_cast<int64_t>(normalized_shape.size()));
  if (norm_needs_grad(x, weight, Tensor()))
    node->stats = make_stats(x, Shape(x.shape().begin(), x.shape().end() - nd), false);
  {
    NoGrad no_grad;
    launch_norm("rms_norm", x, weight, Tensor(), out, node->stats,
                [normalized_shape, eps](const Tensor& x, const Tensor& w, const Tensor&,
                                        const Tensor& o, const kernels::NormStats& s) {
                  kernels::rms_norm(x, normalized_shape, w, eps, o, s);
                });
  }
  node->kind = NormKind::Rms;
  node->normalized_shape = normalized_shape;
  return record_norm(out, node, x, weight, Tensor());
}

Tensor group_norm(const Tensor& x_in, int64_t groups, const Tensor& weight_in,
                  const Tensor& bias_in, double eps, Activation activation) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::GroupNorm, x_in, weight_in, bias_in);
  ops_detail::check_float("group_norm", x);
  MIXPREC_CHECK(activation == Activation::None || activation == Activation::SiLU,
                "[group_norm] the fused activation must be None or SiLU");
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  auto node = std::make_shared<NormBackward>();
  if (norm_needs_grad(x, weight, bias) && x.dim() >= 1)
    node->stats = make_stats(x, {x.size(0), groups}, true);
  {
    NoGrad no_grad;
    auto run = [groups, eps](Activation act) {
      return [groups, eps, act](const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& o, const kernels::NormStats& s) {
        kernels::group_norm(x, groups, w, b, eps, o, act, s);
      };
    };
    // A graph may fold a SiLU that follows into the kernel (CaptureOptions::fuse_epilogues).
    capture::Fusions fusions;
    if (activation == Activation::None)
      fusions.applying_activation = [run](std::string_view op) {
        return op == "silu" ? norm_kernel(run(Activation::SiLU)) : capture::Kernel();
      };
    launch_norm(activation == Activation::SiLU ? "group_norm_silu" : "group_norm", x, weight,
                bias, out, node->stats, run(activation), std::move(fusions));
  }
  node->kind = NormKind::Group;
  node->groups = groups;
  node->activation = activation;
  return record_norm(out, node, x, weight, bias);
}

}  // namespace mixprec
