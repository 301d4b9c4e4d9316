#include "mixprec/ops/linalg.h"

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/transpose.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/reduce.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::MatrixView;
using kernels::MutableMatrixView;

MatrixView view_of(const Tensor& t) {  // a 2-D tensor, any strides
  return {t.data_ptr(), t.dtype(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

MutableMatrixView mutable_view_of(const Tensor& t) {  // a 2-D tensor, row-contiguous
  return {t.data_ptr(), t.dtype(), t.size(0), t.size(1), t.stride(0)};
}

// The GEMM epilogue adding `bias` (a contiguous [N], or nullptr for none).
kernels::GemmEpilogue bias_epilogue(const Tensor* bias) {
  kernels::GemmEpilogue ep;
  if (bias != nullptr) {
    ep.bias = bias->data_ptr();
    ep.bias_dtype = bias->dtype();
  }
  return ep;
}

// out [M, N] = a [M, K] * b [K, N] (+ bias); out must be row-contiguous.
void gemm_2d(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor* bias = nullptr) {
  capture::launch("gemm", {&a, &b, bias}, {&out}, [](const capture::KernelArgs& k) {
    kernels::gemm(view_of(k.in(0)), view_of(k.in(1)), mutable_view_of(k.out(0)),
                  bias_epilogue(k.optional(2)));
  });
}

Tensor matmul_forward(const Tensor& a, const Tensor& b) {
  MIXPREC_CHECK(a.dim() >= 2 && b.dim() >= 2, "[matmul] expected operands of at least 2 dims, got ",
                shape_to_string(a.shape()), " and ", shape_to_string(b.shape()));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  MIXPREC_CHECK(b.size(-2) == k, "[matmul] inner dimensions differ: ", shape_to_string(a.shape()),
                " x ", shape_to_string(b.shape()));
  const DType dtype = promote(a.dtype(), b.dtype());
  Shape out_shape(a.shape().begin(), a.shape().end() - 2);
  if (a.dim() == 2 && b.dim() == 2) {
    Tensor out = Tensor::empty({m, n}, dtype);
    gemm_2d(a, b, out);
    return out;
  }
  MIXPREC_CHECK(b.dim() == 2 || Shape(b.shape().begin(), b.shape().end() - 2) == out_shape,
                "[matmul] batch dims of ", shape_to_string(a.shape()), " and ",
                shape_to_string(b.shape()), " differ (b may also be 2-D)");
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, dtype);
  const int64_t batch = a.numel() / std::max<int64_t>(1, m * k);
  if (b.dim() == 2) {  // one weight for every batch item: a single [batch * M, K] GEMM
    gemm_2d(a.contiguous().reshape({batch * m, k}), b, out.view({batch * m, n}));
    return out;
  }
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  capture::launch("gemm_batched", {&ac, &bc}, {&out}, [batch, m, k, n](const capture::KernelArgs& a) {
    const Tensor &x = a.in(0), &y = a.in(1), &o = a.out(0);
    kernels::gemm_batched(batch, MatrixView::row_major(x.data_ptr(), x.dtype(), m, k, k),
                          MatrixView::row_major(y.data_ptr(), y.dtype(), k, n, n),
                          MutableMatrixView::row_major(o.data_ptr(), o.dtype(), m, n, n),
                          {m * k, k * n, m * n, 0});
  });
  return out;
}

struct MatmulBackward final : autograd::Node {
  Tensor a, b;
  std::string_view name() const override { return "MatmulBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor ga, gb;
    // Transposed operands are made contiguous first (O(n^2) moves against O(n^3) flops): the
    // GEMM packs row-major operands with vector loads, transposed ones element by element.
    if (next_edges[0].valid())
      ga = matmul_forward(g[0], b.transpose(-1, -2).contiguous()).to(a.dtype());
    if (next_edges[1].valid()) {
      if (b.dim() == 2 && a.dim() > 2) {  // shared weight: sum over the batch in one GEMM
        const int64_t k = a.size(-1), n = g[0].size(-1);
        gb =
            matmul_forward(a.reshape({-1, k}).t().contiguous(), g[0].contiguous().reshape({-1, n}));
      } else {
        gb = matmul_forward(a.transpose(-1, -2).contiguous(), g[0]);
      }
      gb = gb.to(b.dtype());
    }
    return {ga, gb};
  }
  void release_saved() override { a = b = Tensor(); }
};

struct LinearBackward final : autograd::Node {
  Tensor x2d, weight;  // x as [N, in]
  Shape x_shape;
  DType bias_dtype = DType::F32;
  std::string_view name() const override { return "LinearBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const Tensor g = grads[0].contiguous().reshape({x2d.size(0), weight.size(0)});  // [N, out]
    Tensor gx, gw, gb;
    if (next_edges[0].valid()) {
      gx = Tensor::empty({x2d.size(0), weight.size(1)}, x2d.dtype());
      gemm_2d(g, weight, gx);
      gx = gx.reshape(x_shape);
    }
    if (next_edges[1].valid()) {
      // gw [out, in] = g^T x. The bf16 packer reads g^T in place. Elsewhere g^T goes into
      // memory first (N x out moves against 2 N out in flops): AMX tiles read A's rows in
      // place, and the other packers would take a strided A element by element, 3x slower than
      // the GEMM itself.
      gw = Tensor::empty(weight.shape(), weight.dtype());
      if (kernels::gemm_packs_transposed_a(g.dtype(), x2d.dtype())) {
        gemm_2d(g.transpose(0, 1), x2d, gw);
      } else {
        const Tensor gt = Tensor::empty({g.size(1), g.size(0)}, g.dtype());  // [out, N]
        capture::launch("transpose", {&g}, {&gt}, [](const capture::KernelArgs& k) {
          const Tensor& from = k.in(0);
          kernels::transpose_2d(from.data_ptr(), from.size(0), from.size(1), from.size(1),
                                k.out(0).data_ptr(), from.size(0), from.element_size());
        });
        gemm_2d(gt, x2d, gw);
      }
    }
    if (next_edges.size() > 2 && next_edges[2].valid()) gb = sum(g, {0}).to(bias_dtype);
    return {gx, gw, gb};
  }
  void release_saved() override { x2d = weight = Tensor(); }
};

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = amp::autocast_args(amp::AutocastOp::Matmul, a_in, b_in);
  ops_detail::check_float("matmul", a);
  ops_detail::check_float("matmul", b);
  Tensor out;
  {
    NoGrad no_grad;
    out = matmul_forward(a, b);
  }
  ops_detail::record_backward<MatmulBackward>({&a, &b}, {&out}, [&](MatmulBackward& node) {
    node.a = a.detach();
    node.b = b.detach();
  });
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::Linear, x_in, weight_in, bias_in);
  ops_detail::check_float("linear", x);
  ops_detail::check_float("linear", weight);
  MIXPREC_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), "[linear] x ",
                shape_to_string(x.shape()), " does not fit weight ",
                shape_to_string(weight.shape()), " (expected x [..., ",
                weight.dim() == 2 ? weight.size(1) : -1, "] and weight [out, in])");
  if (bias.defined())
    MIXPREC_CHECK(bias.shape() == Shape{weight.size(0)} && is_floating(bias.dtype()),
                  "[linear] bias has shape ", shape_to_string(bias.shape()), ", expected [",
                  weight.size(0), "]");
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  Tensor out, x2d;
  {
    NoGrad no_grad;
    x2d = x.reshape({-1, x.size(-1)});
    out = Tensor::empty(out_shape, x.dtype());
    const Tensor bias_c = bias.defined() ? bias.contiguous() : Tensor();
    gemm_2d(x2d, weight.t(), out.view({x2d.size(0), weight.size(0)}),
            bias_c.defined() ? &bias_c : nullptr);
  }
  ops_detail::record_backward<LinearBackward>({&x, &weight, &bias}, {&out},
                                              [&](LinearBackward& node) {
                                                node.x2d = x2d.detach();
                                                node.weight = weight.detach();
                                                node.x_shape = x.shape();
                                                if (bias.defined()) node.bias_dtype = bias.dtype();
                                              });
  return out;
}

kernels::PackedMatrix pack_linear_weight(const Tensor& weight, DType x_dtype) {
  ops_detail::check_float("linear", weight);
  MIXPREC_CHECK(weight.dim() == 2, "[linear] expected weight [out, in], got ",
                shape_to_string(weight.shape()));
  return kernels::pack_b(view_of(weight.t()), x_dtype);
}

Tensor linear(const Tensor& x_in, std::shared_ptr<const kernels::PackedMatrix> packed,
              const Tensor& bias_in) {
  MIXPREC_CHECK(packed != nullptr, "[linear] no packed weight");
  const kernels::PackedMatrix& weight = *packed;
  const auto [x, bias] = amp::autocast_args(amp::AutocastOp::Linear, x_in, bias_in);
  MIXPREC_CHECK(!autograd::needs_grad({&x, &bias}),
                "[linear] packed weights are for inference: x and bias must not need a gradient");
  ops_detail::check_float("linear", x);
  MIXPREC_CHECK(x.dim() >= 1 && x.size(-1) == weight.rows(), "[linear] x ",
                shape_to_string(x.shape()), " does not fit the packed weight [", weight.cols(),
                ", ", weight.rows(), "]");
  if (bias.defined())
    MIXPREC_CHECK(bias.shape() == Shape{weight.cols()} && is_floating(bias.dtype()),
                  "[linear] bias has shape ", shape_to_string(bias.shape()), ", expected [",
                  weight.cols(), "]");
  Shape out_shape = x.shape();
  out_shape.back() = weight.cols();
  const Tensor x2d = x.reshape({-1, x.size(-1)});
  Tensor out = Tensor::empty(out_shape, x.dtype());
  const Tensor out2d = out.view({x2d.size(0), weight.cols()});
  const Tensor bias_c = bias.defined() ? bias.contiguous() : Tensor();
  // Input 2, a residual [M, N] (absent here), and the activation a graph may fold in
  // (CaptureOptions::fuse_epilogues): the epilogue adds and applies them before rounding.
  auto kernel = [packed](kernels::Activation activation) {
    return capture::Kernel([packed, activation](const capture::KernelArgs& k) {
      kernels::GemmEpilogue ep = bias_epilogue(k.optional(1));
      ep.activation = activation;
      if (const Tensor* r = k.optional(2)) {
        ep.residual = r->data_ptr();
        ep.residual_dtype = r->dtype();
        ep.residual_ld = r->size(1);
      }
      kernels::gemm_prepacked(view_of(k.in(0)), *packed, mutable_view_of(k.out(0)), ep);
    });
  };
  capture::Fusions fusions;
  fusions.residual_input = 2;
  fusions.writes_any_dtype = true;  // the epilogue rounds once into C's dtype, whatever it is
  fusions.applying_activation = [kernel](std::string_view op) {
    using kernels::Activation;
    const Activation a = op == "relu"        ? Activation::ReLU
                         : op == "gelu_tanh" ? Activation::GeluTanh
                         : op == "gelu_erf"  ? Activation::GeluErf
                         : op == "silu"      ? Activation::SiLU
                                             : Activation::None;
    return a == Activation::None ? capture::Kernel() : kernel(a);
  };
  capture::launch("linear_packed", {&x2d, bias_c.defined() ? &bias_c : nullptr, nullptr},
                  {&out2d}, kernel(kernels::Activation::None), capture::Aliasing::None,
                  std::move(fusions));
  return out;
}

}  // namespace mixprec
