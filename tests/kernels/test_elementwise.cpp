#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/elementwise.h"
#include "support/error_of.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

constexpr DType kFloats[] = {DType::F32, DType::BF16, DType::F16, DType::F64};
constexpr double kInf = std::numeric_limits<double>::infinity();

// The elements of any tensor, row-major, exactly widened to double.
std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

DType compute_of(std::initializer_list<DType> dtypes) {
  for (DType d : dtypes)
    if (d == DType::F64) return DType::F64;
  return DType::F32;
}

// Element-by-element comparison against an f64 reference with the shared tolerance table;
// scale[i] is the magnitude the f32 arithmetic worked at (|inputs|), n_ops the roundings in it.
void expect_close(const Tensor& got_t, const std::vector<double>& want,
                  const std::vector<double>& scale, DType compute, int n_ops,
                  const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<double> got = values(got_t);
  ASSERT_EQ(got.size(), want.size());
  const test_support::Tolerance tol = test_support::tolerance_for(got_t.dtype(), compute);
  int failures = 0;
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (std::isnan(want[i])) {
      if (!std::isnan(got[i]))
        ++failures, ADD_FAILURE() << "[" << i << "] = " << got[i] << ", expected NaN";
      continue;
    }
    if (std::isinf(want[i])) {
      if (got[i] != want[i])
        ++failures, ADD_FAILURE() << "[" << i << "] = " << got[i] << ", expected " << want[i];
      continue;
    }
    const double bound = tol.bound(want[i], n_ops, scale[i]);
    if (!(std::fabs(got[i] - want[i]) <= bound))
      ++failures, ADD_FAILURE() << "[" << i << "] = " << got[i] << ", reference " << want[i]
                                << ", |diff| " << std::fabs(got[i] - want[i]) << " > bound "
                                << bound;
  }
}

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

double unary_ref(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return std::fabs(x);
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Reciprocal:
      return 1.0 / x;
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryOp::Relu:
      return x > 0 ? x : 0.0;
    case UnaryOp::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Silu:
      return x / (1.0 + std::exp(-x));
    case UnaryOp::GeluTanh:
      return gelu_tanh_ref(x);
    case UnaryOp::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  }
  return NAN;
}

double activation_ref(Activation act, double x) {
  switch (act) {
    case Activation::None:
      return x;
    case Activation::ReLU:
      return x > 0 ? x : 0.0;
    case Activation::GeluTanh:
      return gelu_tanh_ref(x);
    case Activation::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::SiLU:
      return x / (1.0 + std::exp(-x));
  }
  return NAN;
}

double binary_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Pow:
      return std::pow(a, b);
    case BinaryOp::Max:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case BinaryOp::Min:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  }
  return NAN;
}

bool positive_domain(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt ||
         op == UnaryOp::Reciprocal;
}

void check_unary(UnaryOp op, const Tensor& x, const Tensor& out, const std::string& what) {
  unary(op, x, out);
  const std::vector<double> xv = values(x);
  std::vector<double> want(xv.size()), scale(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    want[i] = unary_ref(op, xv[i]);
    scale[i] = std::fabs(xv[i]) + std::fabs(want[i]);
  }
  expect_close(out, want, scale, compute_of({x.dtype(), out.dtype()}), 4,
               what + " " + std::string(unary_op_name(op)) + " " +
                   std::string(dtype_name(x.dtype())) + " -> " +
                   std::string(dtype_name(out.dtype())));
}

// a and b are broadcast by the reference through Tensor::expand, independently of the kernel.
void check_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                  const std::string& what) {
  binary(op, a, b, out);
  const std::vector<double> av = values(a.expand(out.shape())), bv = values(b.expand(out.shape()));
  std::vector<double> want(av.size()), scale(av.size());
  for (std::size_t i = 0; i < av.size(); ++i) {
    want[i] = binary_ref(op, av[i], bv[i]);
    scale[i] = std::fabs(av[i]) + std::fabs(bv[i]) + std::fabs(want[i]);
  }
  expect_close(out, want, scale, compute_of({a.dtype(), b.dtype(), out.dtype()}), 1,
               what + " " + std::string(binary_op_name(op)) + " " +
                   std::string(dtype_name(a.dtype())) + ", " + std::string(dtype_name(b.dtype())) +
                   " -> " + std::string(dtype_name(out.dtype())));
}

class ElementwiseTest : public IsaTest {};

TEST_P(ElementwiseTest, UnaryOddSizesEveryDtypeMatchesReference) {
  Generator gen(11);
  for (std::size_t o = 0; o < kNumUnaryOps; ++o) {
    const auto op = static_cast<UnaryOp>(o);
    for (DType t : kFloats)
      for (int64_t n : {1, 7, 17, 63, 65, 129}) {
        const Tensor x = positive_domain(op) ? Tensor::uniform({n}, 0.01, 10.0, gen, t)
                                             : Tensor::uniform({n}, -6.0, 6.0, gen, t);
        check_unary(op, x, Tensor::empty({n}, t), "n=" + std::to_string(n));
      }
  }
}

TEST_P(ElementwiseTest, UnaryIntoAnotherDtypeRoundsOnce) {
  Generator gen(12);
  const Tensor x = Tensor::uniform({3, 65}, -4.0, 4.0, gen, DType::F32);
  for (DType out : {DType::BF16, DType::F16, DType::F64})
    for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::GeluErf})
      check_unary(op, x, Tensor::empty({3, 65}, out), "f32 in");
  check_unary(UnaryOp::Silu, x.to(DType::BF16), Tensor::empty({3, 65}, DType::F32), "bf16 in");
  for (DType out : {DType::F32, DType::BF16})  // f64 compute, rounded once into 32 or 16 bits
    check_unary(UnaryOp::Exp, x.to(DType::F64), Tensor::empty({3, 65}, out), "f64 in");
}

TEST_P(ElementwiseTest, UnaryStridedInputsAndOutputs) {
  Generator gen(13);
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor base = Tensor::uniform({65, 17}, -3.0, 3.0, gen, t);
    check_unary(UnaryOp::GeluTanh, base.t(), Tensor::empty({17, 65}, t), "transposed input");
    check_unary(UnaryOp::Sigmoid, base.slice(0, 1, 64, 3), Tensor::empty({21, 17}, t),
                "sliced input");
    check_unary(UnaryOp::Exp, base.slice(0, 0, 1).expand({9, 17}), Tensor::empty({9, 17}, t),
                "expanded input");
    const Tensor out_base = Tensor::zeros({65, 17}, t);
    check_unary(UnaryOp::Tanh, base.t(), out_base.t(), "transposed input and output");
    const Tensor cl =
        Tensor::uniform({2, 7, 3, 5}, -3.0, 3.0, gen, t).contiguous(MemoryFormat::ChannelsLast);
    check_unary(UnaryOp::Silu, cl, Tensor::empty({2, 7, 3, 5}, t), "channels_last input");
    check_unary(UnaryOp::Silu, cl, Tensor::empty({2, 7, 3, 5}, t, MemoryFormat::ChannelsLast),
                "channels_last both");
  }
}

TEST_P(ElementwiseTest, LargeTensorsSplitOverThreads) {
  Generator gen(14);
  const Tensor x = Tensor::uniform({301, 129}, -5.0, 5.0, gen, DType::BF16);
  check_unary(UnaryOp::GeluErf, x, Tensor::empty({301, 129}, DType::BF16), "large contiguous");
  check_unary(UnaryOp::Exp, x.t(), Tensor::empty({129, 301}, DType::F32), "large transposed");
  const Tensor b = Tensor::uniform({129}, -1.0, 1.0, gen, DType::F32);
  check_binary(BinaryOp::Mul, x, b, Tensor::empty({301, 129}, DType::BF16), "large broadcast");
}

TEST_P(ElementwiseTest, UnarySpecialValues) {
  const Tensor x = Tensor::from_vector<float>(
      {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN, 100.0f, -100.0f, 1e-40f});
  auto run = [&](UnaryOp op) {
    const Tensor out = Tensor::empty({9}, DType::F32);
    unary(op, x, out);
    return values(out);
  };
  const std::vector<double> e = run(UnaryOp::Exp);
  EXPECT_EQ(e[0], 1.0);
  EXPECT_EQ(e[3], kInf);
  EXPECT_EQ(e[4], 0.0);
  EXPECT_TRUE(std::isnan(e[5]));
  EXPECT_EQ(e[6], kInf) << "exp(100) overflows f32";
  EXPECT_NEAR(e[7], std::exp(-100.0), 1e-45) << "exp(-100) is a subnormal, kept";
  const std::vector<double> l = run(UnaryOp::Log);
  EXPECT_EQ(l[0], -kInf);
  EXPECT_EQ(l[1], -kInf);
  EXPECT_TRUE(std::isnan(l[2]));
  EXPECT_EQ(l[3], kInf);
  EXPECT_TRUE(std::isnan(l[5]));
  EXPECT_NEAR(l[8], std::log(double(1e-40f)), 1e-5) << "subnormal input";
  const std::vector<double> s = run(UnaryOp::Sqrt);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_TRUE(std::signbit(s[1])) << "sqrt(-0) = -0";
  const std::vector<double> r = run(UnaryOp::Relu);
  EXPECT_TRUE(std::isnan(r[5])) << "relu keeps NaN";
  EXPECT_EQ(r[4], 0.0);
  const std::vector<double> t = run(UnaryOp::Tanh);
  EXPECT_EQ(t[3], 1.0);
  EXPECT_EQ(t[4], -1.0);
  EXPECT_TRUE(std::signbit(t[1])) << "tanh(-0) = -0";
  const std::vector<double> n = run(UnaryOp::Neg);
  EXPECT_TRUE(std::signbit(n[0]));
  EXPECT_EQ(run(UnaryOp::GeluErf)[3], kInf);
  EXPECT_LT(run(UnaryOp::Sigmoid)[7], 1e-38) << "sigmoid saturates to (almost) 0";
}

// exp's tail, every f32 in [-110, -86]: normal results to a few ulps, subnormal ones to one
// subnormal step, and exactly 0 where e^x is under half the smallest subnormal (x < -103.97).
// Lanes below -104 are set to 0 without computing the underflow (a microcode assist per
// instruction on Intel); this pins down that the shortcut changes no value, at every level.
TEST_P(ElementwiseTest, ExpThroughTheSubnormalsToZero) {
  std::vector<float> xs;
  for (float x = -110.0f; x <= -86.0f; x = std::nextafter(x, 0.0f)) xs.push_back(x);
  const Tensor x = Tensor::from_vector<float>(xs);
  const Tensor out = Tensor::empty(x.shape(), DType::F32);
  unary(UnaryOp::Exp, x, out);
  const float* got = out.data<float>();
  const double smallest = std::ldexp(1.0, -149);
  int64_t failures = 0, zeros = 0, subnormals = 0;
  for (std::size_t i = 0; i < xs.size() && failures < 5; ++i) {
    const double want =
        static_cast<float>(std::exp(static_cast<double>(xs[i])));        // RNE, subnormals kept
    const double bound = std::max(smallest, 4 * std::ldexp(want, -23));  // 4 ulps
    if (xs[i] < -104.0f ? got[i] != 0.0f : !(std::fabs(got[i] - want) <= bound))
      ++failures, ADD_FAILURE() << "exp(" << xs[i] << ") = " << got[i] << ", reference " << want;
    zeros += got[i] == 0.0f;
    subnormals += got[i] != 0.0f && std::fabs(got[i]) < std::numeric_limits<float>::min();
  }
  EXPECT_GT(zeros, 0);
  EXPECT_GT(subnormals, 0);
  EXPECT_GT(got[std::lower_bound(xs.begin(), xs.end(), -103.9f) - xs.begin()], 0.0f)
      << "e^-103.9 rounds to the smallest subnormal";
}

// Where 2^n leaves the normal floats (every f32 in [-110, -86] and [86, 89]) exp scales by it
// in one step on AVX-512 (vscalefps takes any exponent) and as two normal factors elsewhere.
// The first factor is exact, so both round the same product once: the same bits as the scalar
// level, and so as every level.
TEST_P(ElementwiseTest, ExpBeyondTheNormalExponentsMatchesTheScalarLevelBitForBit) {
  std::vector<float> xs;
  for (float x = -110.0f; x <= -86.0f; x = std::nextafter(x, 0.0f)) xs.push_back(x);
  for (float x = 86.0f; x <= 89.0f; x = std::nextafter(x, 100.0f)) xs.push_back(x);
  const Tensor x = Tensor::from_vector<float>(xs);
  const Tensor got = Tensor::empty(x.shape(), DType::F32),
               want = Tensor::empty(x.shape(), DType::F32);
  unary(UnaryOp::Exp, x, got);
  {
    const ScopedIsa scalar(IsaLevel::Scalar);
    unary(UnaryOp::Exp, x, want);
  }
  int64_t failures = 0;
  for (std::size_t i = 0; i < xs.size() && failures < 5; ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::memcmp(&g, &w, sizeof g) != 0)
      ++failures, ADD_FAILURE() << "exp(" << xs[i] << ") = " << g << ", scalar level " << w;
  }
}

TEST_P(ElementwiseTest, BinaryBroadcastingEveryOpAndDtype) {
  Generator gen(21);
  for (std::size_t o = 0; o < kNumBinaryOps; ++o) {
    const auto op = static_cast<BinaryOp>(o);
    const double lo = op == BinaryOp::Pow ? 0.1 : -3.0;
    const double b_lo = op == BinaryOp::Div ? 0.5 : lo, b_hi = op == BinaryOp::Pow ? 2.5 : 3.0;
    for (DType t : kFloats) {
      struct Case {
        Shape a, b;
      };
      for (const Case& c :
           {Case{{17, 65}, {17, 65}}, Case{{17, 65}, {65}}, Case{{17, 1}, {1, 63}},
            Case{{3, 1, 7}, {5, 1}}, Case{{}, {129}}, Case{{7}, {}}, Case{{1}, {1}}}) {
        const Tensor a = Tensor::uniform(c.a, lo, 3.0, gen, t),
                     b = Tensor::uniform(c.b, b_lo, b_hi, gen, t);
        const Shape shape = broadcast_shapes(c.a, c.b);
        check_binary(op, a, b, Tensor::empty(shape, t),
                     shape_to_string(c.a) + " with " + shape_to_string(c.b));
      }
    }
  }
}

TEST_P(ElementwiseTest, BinaryMixedDtypesAndStrides) {
  Generator gen(22);
  const Tensor a = Tensor::uniform({65, 17}, -2.0, 2.0, gen, DType::BF16);
  const Tensor b = Tensor::uniform({17, 65}, -2.0, 2.0, gen, DType::F32);
  check_binary(BinaryOp::Add, a.t(), b, Tensor::empty({17, 65}, DType::F32), "bf16^T + f32");
  check_binary(BinaryOp::Mul, a.t(), b, Tensor::empty({17, 65}, DType::BF16),
               "bf16^T * f32 -> bf16");
  check_binary(BinaryOp::Sub, b, a.to(DType::F16).t(), Tensor::empty({17, 65}, DType::F16),
               "f32 - f16^T");
  check_binary(BinaryOp::Div, b.to(DType::F64), a.t(), Tensor::empty({17, 65}, DType::F64),
               "f64 / bf16^T");
  check_binary(BinaryOp::Max, b.slice(1, 1, 65, 4), a.t().slice(1, 0, 64, 4),
               Tensor::empty({17, 16}, DType::F32), "sliced");
  const Tensor out = Tensor::zeros({65, 17}, DType::F32);
  check_binary(BinaryOp::Min, a.t(), b, out.t(), "transposed output");
}

TEST_P(ElementwiseTest, MaxAndMinPropagateNaNFromEitherSide) {
  const Tensor a = Tensor::from_vector<float>({NAN, 1.0f, NAN, -2.0f});
  const Tensor b = Tensor::from_vector<float>({1.0f, NAN, NAN, 3.0f});
  for (BinaryOp op : {BinaryOp::Max, BinaryOp::Min}) {
    const Tensor out = Tensor::empty({4});
    binary(op, a, b, out);
    const std::vector<double> v = values(out);
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]) && std::isnan(v[2])) << binary_op_name(op);
    EXPECT_EQ(v[3], op == BinaryOp::Max ? 3.0 : -2.0);
  }
}

TEST_P(ElementwiseTest, InPlaceAndOverlappingOutputs) {
  Generator gen(23);
  const Tensor a = Tensor::uniform({33, 33}, -1.0, 1.0, gen);
  const Tensor b = Tensor::uniform({33}, -1.0, 1.0, gen);
  const Tensor expect = Tensor::empty({33, 33});
  binary(BinaryOp::Add, a, b, expect);
  const Tensor in_place = a.clone();
  binary(BinaryOp::Add, in_place, b, in_place);
  EXPECT_EQ(values(in_place), values(expect));
  // out is the transpose of an input in the same storage: the input must be read before any
  // write, so the kernel copies it first.
  const Tensor m = a.clone();
  const Tensor expect_t = Tensor::empty({33, 33});
  binary(BinaryOp::Sub, a.t(), a, expect_t);
  binary(BinaryOp::Sub, m.t(), m, m);
  EXPECT_EQ(values(m), values(expect_t));
}

TEST_P(ElementwiseTest, ClampAxpbyAndEdges) {
  Generator gen(24);
  for (DType t : kFloats) {
    const Tensor x = Tensor::uniform({7, 17}, -3.0, 3.0, gen, t),
                 y = Tensor::uniform({17}, -3.0, 3.0, gen, t);
    const std::vector<double> xv = values(x), yv = values(y.expand({7, 17}));
    for (auto [lo, hi] : {std::pair{-1.0, 0.5}, std::pair{-kInf, 0.0}, std::pair{0.25, kInf},
                          std::pair{2.0, -1.0}}) {
      const Tensor out = Tensor::empty({7, 17}, t);
      clamp(x, lo, hi, out);
      std::vector<double> want(xv.size());
      for (std::size_t i = 0; i < xv.size(); ++i) want[i] = std::min(hi, std::max(lo, xv[i]));
      expect_close(out, want, want, compute_of({t}), 0, "clamp");
    }
    const Tensor out = Tensor::empty({7, 17}, t);
    axpby(0.75, x, -1.5, y, out);
    std::vector<double> want(xv.size()), scale(xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
      want[i] = 0.75 * xv[i] - 1.5 * yv[i];
      scale[i] = std::fabs(0.75 * xv[i]) + std::fabs(1.5 * yv[i]);
    }
    expect_close(out, want, scale, compute_of({t}), 2, "axpby");
  }
  const Tensor nan_in = Tensor::from_vector<float>({NAN, 5.0f});
  const Tensor out = Tensor::empty({2});
  clamp(nan_in, 0.0, 1.0, out);
  EXPECT_TRUE(std::isnan(values(out)[0]));
  EXPECT_EQ(values(out)[1], 1.0);
  const Tensor empty = Tensor::empty({0, 5});
  unary(UnaryOp::Exp, empty, Tensor::empty({0, 5}));  // nothing to do, nothing to fail
}

TEST_P(ElementwiseTest, BiasActivationOverTheChannelDim) {
  Generator gen(25);
  const Activation acts[] = {Activation::None, Activation::ReLU, Activation::GeluTanh,
                             Activation::GeluErf, Activation::SiLU};
  struct Case {
    Shape shape;
    int64_t channel_dim;
    MemoryFormat format;
  };
  for (const Case& c :
       {Case{{63, 17}, 1, MemoryFormat::Contiguous}, Case{{2, 7, 65}, 2, MemoryFormat::Contiguous},
        Case{{2, 17, 3, 5}, 1, MemoryFormat::Contiguous},
        Case{{2, 17, 3, 5}, 1, MemoryFormat::ChannelsLast}})
    for (DType t : {DType::F32, DType::BF16, DType::F64})
      for (Activation act : acts) {
        const int64_t channels = c.shape[static_cast<std::size_t>(c.channel_dim)];
        const Tensor x = Tensor::uniform(c.shape, -3.0, 3.0, gen, t).contiguous(c.format);
        const Tensor bias = Tensor::uniform({channels}, -1.0, 1.0, gen, DType::F32);
        const Tensor out = Tensor::empty(c.shape, t, c.format);
        bias_activation(x, bias, act, out);
        Shape bias_view(c.shape.size() - static_cast<std::size_t>(c.channel_dim), 1);
        bias_view[0] = channels;
        const std::vector<double> xv = values(x), bv = values(bias.view(bias_view).expand(c.shape));
        std::vector<double> want(xv.size()), scale(xv.size());
        for (std::size_t i = 0; i < xv.size(); ++i) {
          want[i] = activation_ref(act, xv[i] + bv[i]);
          scale[i] = std::fabs(xv[i]) + std::fabs(bv[i]);
        }
        expect_close(
            out, want, scale, compute_of({t}), 4,
            "bias_activation " + shape_to_string(c.shape) + " act " + std::to_string(int(act)));
      }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ElementwiseTest);

// The message of the Error `body` throws.
using test_support::error_of;

TEST(Elementwise, BadArgumentsAreClearErrors) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  EXPECT_EQ(error_of([&] {
              binary(BinaryOp::Add, a, b, Tensor::empty({2, 3}));
            }),
            "[add] shapes [2, 3] and [4] cannot be broadcast: sizes 3 and 4 at dim 1 differ and "
            "neither is 1");
  EXPECT_NE(error_of([&] {
              binary(BinaryOp::Mul, a, Tensor::zeros({3}), Tensor::empty({3, 2}));
            }).find("[mul] out has shape [3, 2], expected [2, 3] (the inputs' broadcast shape)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              unary(UnaryOp::Exp, Tensor::zeros({2}, DType::I64), Tensor::empty({2}));
            }).find("[exp] x has dtype i64, expected a floating dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              unary(UnaryOp::Relu, a, Tensor::zeros({3}).expand({2, 3}));
            }).find("[relu] out is a broadcast view"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              bias_activation(Tensor::zeros({2, 8, 4, 4}), Tensor::zeros({7}), Activation::SiLU,
                              Tensor::empty({2, 8, 4, 4}));
            }).find("[bias_activation] bias has shape [7], expected [8] (dim 1 of x [2, 8, 4, 4])"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              clamp(a, NAN, 1.0, Tensor::empty({2, 3}));
            }).find("[clamp] bounds must not be NaN"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              unary(UnaryOp::Exp, Tensor(), Tensor::empty({2}));
            }).find("[exp] x is an undefined"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::kernels
