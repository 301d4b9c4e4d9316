// Activation front-ends. The backward is one elementwise kernel (kernels::unary_backward): the
// derivative in closed form in f32 (f64 for f64 tensors) from the saved input, times the
// incoming gradient, rounded once into the input's dtype.
#include "mixprec/ops/activation.h"

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/mode/grad_mode.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::UnaryOp;

struct ActivationBackward final : autograd::Node {
  UnaryOp op;
  Tensor x;
  ActivationBackward(UnaryOp op_, Tensor x_) : op(op_), x(std::move(x_)) {}
  std::string_view name() const override { return kernels::unary_op_name(op); }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    // One vectorised pass in x's layout: dx = grad * f'(x), rounded once into x's dtype.
    Tensor dx = Tensor::empty_like(x, MemoryFormat::Preserve);
    capture::launch(std::string(kernels::unary_op_name(op)) + "_backward", {&x, &grads[0]}, {&dx},
                    [op = op](const capture::KernelArgs& k) {
                      kernels::unary_backward(op, k.in(0), k.in(1), k.out(0));
                    });
    return {dx};
  }
  void release_saved() override { x = Tensor(); }
};

Tensor activation(amp::AutocastOp policy, UnaryOp op, const Tensor& x_in) {
  const auto [x] = amp::autocast_args(policy, x_in);
  ops_detail::check_float(kernels::unary_op_name(op).data(), x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.suggest_memory_format());
  {
    NoGrad no_grad;
    capture::launch(
        kernels::unary_op_name(op), {&x}, {&out},
        [op](const capture::KernelArgs& k) { kernels::unary(op, k.in(0), k.out(0)); },
        capture::Aliasing::Elementwise);
  }
  if (autograd::needs_grad({&x}))
    autograd::record(std::make_shared<ActivationBackward>(op, x.detach()), {&x}, {&out});
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, GeluApproximation a) {
  return activation(amp::AutocastOp::Gelu,
                    a == GeluApproximation::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x);
}
Tensor silu(const Tensor& x) { return activation(amp::AutocastOp::Silu, UnaryOp::Silu, x); }
Tensor sigmoid(const Tensor& x) {
  return activation(amp::AutocastOp::Sigmoid, UnaryOp::Sigmoid, x);
}
Tensor tanh(const Tensor& x) { return activation(amp::AutocastOp::Tanh, UnaryOp::Tanh, x); }

}  // namespace mixprec
