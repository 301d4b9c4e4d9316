// Activation front-ends. The backward evaluates each derivative in closed form per element in
// f32 (f64 for f64 tensors) from the saved input, and rounds once into the input's dtype.
#include "mixprec/ops/activation.h"

#include <cmath>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/elementwise.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::UnaryOp;

template <typename T>
T derivative(UnaryOp op, T x) {
  constexpr T kSqrt2OverPi = T(0.79788456080286535588), kA = T(0.044715);
  switch (op) {
    case UnaryOp::Sigmoid: {
      const T s = T(1) / (T(1) + std::exp(-x));
      return s * (T(1) - s);
    }
    case UnaryOp::Tanh: {
      const T t = std::tanh(x);
      return T(1) - t * t;
    }
    case UnaryOp::Silu: {
      const T s = T(1) / (T(1) + std::exp(-x));
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::GeluTanh: {
      const T t = std::tanh(kSqrt2OverPi * (x + kA * x * x * x));
      return T(0.5) * (T(1) + t) +
             T(0.5) * x * (T(1) - t * t) * kSqrt2OverPi * (T(1) + T(3) * kA * x * x);
    }
    case UnaryOp::GeluErf: {
      const T cdf = T(0.5) * (T(1) + std::erf(x / std::sqrt(T(2))));
      const T pdf = std::exp(T(-0.5) * x * x) / std::sqrt(T(2) * T(3.14159265358979323846));
      return cdf + x * pdf;
    }
    default:
      return T(0);
  }
}

struct ActivationBackward final : autograd::Node {
  UnaryOp op;
  Tensor x;
  ActivationBackward(UnaryOp op_, Tensor x_) : op(op_), x(std::move(x_)) {}
  std::string_view name() const override { return kernels::unary_op_name(op); }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const Tensor xs = x.to(acc).contiguous(), gs = grads[0].to(acc).contiguous();
    Tensor dx = Tensor::empty(x.shape(), acc);
    visit_dtype(acc, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        const T* xp = xs.data<T>();
        const T* gp = gs.data<T>();
        T* out = dx.data<T>();
        parallel_for(0, xs.numel(), 16384, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) out[i] = gp[i] * derivative(op, xp[i]);
        });
      }
    });
    return {dx.to(x.dtype())};
  }
  void release_saved() override { x = Tensor(); }
};

Tensor activation(amp::AutocastOp policy, UnaryOp op, const Tensor& x_in) {
  const Tensor x = amp::autocast_args(policy, x_in)[0];
  ops_detail::check_float(kernels::unary_op_name(op).data(), x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  {
    NoGrad no_grad;
    kernels::unary(op, x, out);
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
