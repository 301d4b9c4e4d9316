// kernels::unary_backward (activation derivatives, simd_math_grad.h) against f64 definitions,
// on every kernel level, every float dtype, tails, and strided / channels_last layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/elementwise.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

// f'(x) from the definitions, in f64 (erf form from std::erf, tanh form by the chain rule).
double derivative_ref(UnaryOp op, double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  switch (op) {
    case UnaryOp::Sigmoid:
      return s * (1.0 - s);
    case UnaryOp::Tanh: {
      const double t = std::tanh(x);
      return 1.0 - t * t;
    }
    case UnaryOp::Silu:
      return s + x * s * (1.0 - s);
    case UnaryOp::GeluTanh: {
      const double c = std::sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x);
      const double t = std::tanh(u);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
    }
    case UnaryOp::GeluErf:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
             x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    default:
      return NAN;
  }
}

constexpr UnaryOp kOps[] = {UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Silu, UnaryOp::GeluTanh,
                            UnaryOp::GeluErf};

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// x spread over [-12, 12] with the interesting points (0, tiny, the zero crossings) included.
Tensor make_x(const Shape& shape, DType dtype, Generator& gen) {
  Tensor x = Tensor::uniform(shape, -12.0, 12.0, gen, DType::F64);
  const double specials[] = {0.0, -0.0, 1e-30, -1e-6, 0.5, -0.5, -1.28, -0.75, 3.0, -20.0, 20.0};
  double* p = x.data<double>();
  for (int64_t i = 0; i < std::min<int64_t>(x.numel(), 11); ++i) p[i] = specials[i];
  return x.to(dtype);
}

void expect_matches(UnaryOp op, const Tensor& x, const Tensor& g, const Tensor& out,
                    const std::string& what) {
  const std::vector<double> xv = values(x), gv = values(g), ov = values(out);
  const bool f64 = out.dtype() == DType::F64 || x.dtype() == DType::F64;
  const test_support::Tolerance tol =
      test_support::tolerance_for(out.dtype(), f64 ? DType::F64 : DType::F32);
  int bad = 0;
  for (std::size_t i = 0; i < xv.size() && bad < 5; ++i) {
    const double ref = gv[i] * derivative_ref(op, xv[i]);
    const double bound = tol.bound(ref, 1, std::fabs(ref)) + 2.0 * tol.function * std::fabs(gv[i]);
    if (!(std::fabs(ov[i] - ref) <= bound)) {
      ++bad;
      ADD_FAILURE() << what << " " << unary_op_name(op) << " at " << i << ": x " << xv[i] << " g "
                    << gv[i] << " got " << ov[i] << " want " << ref << " (bound " << bound << ")";
    }
  }
}

class ActivationBackward : public IsaTest {};

TEST_P(ActivationBackward, MatchesF64DefinitionEveryDtypeAndTail) {
  Generator gen(7);
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64})
    for (int64_t n : {1, 7, 16, 17, 33, 257, 1000}) {
      const Tensor x = make_x({n}, dt, gen);
      const Tensor g = Tensor::uniform({n}, -1.0, 1.0, gen, dt);
      for (UnaryOp op : kOps) {
        Tensor out = Tensor::empty({n}, dt);
        unary_backward(op, x, g, out);
        expect_matches(op, x, g, out, std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      }
    }
}

TEST_P(ActivationBackward, MixedDtypesAndLayouts) {
  Generator gen(11);
  // bf16 x with an f32 gradient into bf16; channels_last x with a contiguous gradient; a
  // transposed view.
  const Tensor x = make_x({2, 5, 3, 7}, DType::BF16, gen).contiguous(MemoryFormat::ChannelsLast);
  const Tensor g = Tensor::uniform({2, 5, 3, 7}, -1.0, 1.0, gen, DType::F32);
  const Tensor xt = make_x({9, 13}, DType::F32, gen).t();
  const Tensor gt = Tensor::uniform({13, 9}, -1.0, 1.0, gen, DType::F16);
  for (UnaryOp op : kOps) {
    Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
    unary_backward(op, x, g, out);
    expect_matches(op, x, g, out, "channels_last bf16");
    Tensor out_t = Tensor::empty({13, 9}, DType::F32);
    unary_backward(op, xt, gt, out_t);
    expect_matches(op, xt, gt, out_t, "transposed f32");
  }
}

TEST_P(ActivationBackward, LevelsAgreeWithScalarReference) {
  Generator gen(3);
  const Tensor x = make_x({1031}, DType::F32, gen);
  const Tensor g = Tensor::uniform({1031}, -1.0, 1.0, gen, DType::F32);
  for (UnaryOp op : kOps) {
    Tensor here = Tensor::empty({1031}, DType::F32), scalar = Tensor::empty({1031}, DType::F32);
    unary_backward(op, x, g, here);
    {
      ScopedIsa s(IsaLevel::Scalar);
      unary_backward(op, x, g, scalar);
    }
    const std::vector<double> a = values(here), b = values(scalar);
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 4e-7 * (1.0 + std::fabs(b[i]))) << unary_op_name(op) << " at " << i;
  }
}

TEST_P(ActivationBackward, RejectsOpsWithoutDerivativeAndShapeMismatch) {
  const Tensor x = Tensor::zeros({4}), g = Tensor::zeros({4}), out = Tensor::empty({4});
  EXPECT_THROW(unary_backward(UnaryOp::Exp, x, g, out), Error);
  EXPECT_THROW(unary_backward(UnaryOp::Silu, x, Tensor::zeros({5}), out), Error);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ActivationBackward);

}  // namespace
}  // namespace mixprec::kernels
