// The fused update kernels: every ISA level against the scalar reference, bit for bit, across
// dtypes, tails, master weights and both roundings; stochastic rounding against its
// documented reference and its statistics; the gradient-norm reduction.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/optim.h"
#include "optim_test_util.h"
#include "support/error_of.h"
#include "support/isa_levels.h"

namespace mixprec::kernels {
namespace {

using test_support::bytes_of;
using test_support::IsaTest;

// Sizes around every vector width (8, 16) plus one large enough to split over threads
// (the kernel's grain is 2^14 elements).
constexpr int64_t kSizes[] = {1, 7, 15, 16, 17, 33, 100, 2 * (int64_t{1} << 14) + 5};

struct Case {
  DType param, grad;
  bool master;
  Rounding rounding;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType p : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (DType g : {DType::F32, DType::F16, DType::BF16, DType::F64})
      for (bool master : {false, true})
        for (Rounding r : {Rounding::NearestEven, Rounding::Stochastic}) {
          const bool half = p == DType::F16 || p == DType::BF16;
          if (master && !half) continue;
          cases.push_back({p, g, master, r});
        }
  return cases;
}

std::string describe(const Case& c, int64_t n) {
  return std::string(dtype_name(c.param)) + " param, " + std::string(dtype_name(c.grad)) +
         " grad, " + (c.master ? "master, " : "no master, ") +
         (c.rounding == Rounding::Stochastic ? "stochastic, " : "nearest even, ") +
         std::to_string(n) + " elements";
}

// Fresh operands with reproducible values: moments as after a few steps (v >= 0).
OptimOperands make_operands(const Case& c, int64_t n, uint64_t seed) {
  Generator gen(seed);
  const DType lane = c.param == DType::F64 ? DType::F64 : DType::F32;
  OptimOperands ops;
  const Tensor w = Tensor::uniform({n}, -2, 2, gen, lane);
  ops.param = w.to(c.param).clone();
  ops.grad = Tensor::uniform({n}, -1, 1, gen, c.grad);
  if (c.master) ops.master = w.to(DType::F32).clone();
  ops.state0 = Tensor::uniform({n}, -1, 1, gen, lane);
  ops.state1 = Tensor::rand({n}, gen, lane);
  ops.rounding = c.rounding;
  ops.stream = {seed, 3, 5};
  return ops;
}

std::vector<std::vector<unsigned char>> outputs(const OptimOperands& ops) {
  return {bytes_of(ops.param), bytes_of(ops.master), bytes_of(ops.state0), bytes_of(ops.state1)};
}

template <class Update>
void expect_level_matches_scalar(IsaLevel level, const Update& update) {
  for (const Case& c : all_cases()) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(describe(c, n));
      OptimOperands mine = make_operands(c, n, 11);
      OptimOperands ref = mine;
      for (Tensor* t : {&ref.param, &ref.grad, &ref.master, &ref.state0, &ref.state1})
        if (t->defined()) *t = t->clone();
      {
        ScopedIsa at(level);
        update(mine);
        update(mine);  // a second step reads what the first wrote
      }
      {
        ScopedIsa at(IsaLevel::Scalar);
        update(ref);
        update(ref);
      }
      const auto got = outputs(mine), want = outputs(ref);
      EXPECT_TRUE(got[0] == want[0]) << "param differs from the scalar reference";
      EXPECT_TRUE(got[1] == want[1]) << "master differs from the scalar reference";
      EXPECT_TRUE(got[2] == want[2]) << "state0 differs from the scalar reference";
      EXPECT_TRUE(got[3] == want[3]) << "state1 differs from the scalar reference";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

class OptimKernel : public IsaTest {};

TEST_P(OptimKernel, AdamMatchesScalarBitForBit) {
  for (bool decoupled : {true, false}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam (L2)");
    expect_level_matches_scalar(isa(), [&](const OptimOperands& ops) {
      adam_step({.lr = 1e-2, .weight_decay = 0.1, .decoupled = decoupled, .step = 3}, ops);
    });
  }
}

TEST_P(OptimKernel, SgdMatchesScalarBitForBit) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    expect_level_matches_scalar(isa(), [&](const OptimOperands& ops) {
      sgd_step(
          {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov, .first = false},
          ops);
    });
  }
}

// The kernel's stochastic rounding is exactly the documented reference (stochastic_bits +
// round_stochastic), element by element, on every level: the hash is computed 8 or 16 lanes
// at a time there, so an off-by-one lane or key would show here.
TEST_P(OptimKernel, StochasticRoundingIsTheReferenceRule) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t n = 1000;
    Generator gen(3);
    // Values over the whole range, including f16 subnormals, signs, zeros and large values.
    Tensor x = Tensor::randn({n}, gen, DType::F32);
    for (int64_t i = 0; i < n; i += 7) x.set({i}, x.value({i}) * 1e-6);
    for (int64_t i = 3; i < n; i += 11) x.set({i}, x.value({i}) * 3e4);
    x.set({0}, 0.0);
    x.set({1}, -0.0);
    const StochasticStream stream{.seed = 99, .step = 4, .param_index = 2};
    OptimOperands ops;
    ops.param = Tensor::zeros({n}, dtype);
    ops.grad = Tensor::zeros({n});
    ops.master = x.clone();
    ops.rounding = Rounding::Stochastic;
    ops.stream = stream;
    sgd_step({.lr = 0.0}, ops);  // p = master exactly, then rounded into param
    EXPECT_TRUE(bytes_of(ops.master) == bytes_of(x));
    for (int64_t i = 0; i < n; ++i) {
      const float v = x.at<float>({i});
      const float want = round_stochastic(v, dtype, stochastic_bits(stream, i));
      const double got = ops.param.value({i});
      ASSERT_EQ(got, static_cast<double>(want)) << "element " << i << " = " << v;
      ASSERT_EQ(std::signbit(got), std::signbit(v)) << "element " << i;
    }
  }
}

// The 2-norm's sum of squares runs on eight f64 lanes above the scalar level: the same
// accumulators, so the same bits, for every float dtype, ragged lengths (a tail past the last
// whole vector, several 65536-element blocks) and values whose squares span the f64 range.
TEST_P(OptimKernel, SquareSumMatchesScalarBitForBit) {
  Generator gen(5);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {1, 7, 8, 13, 1000, 65536 * 2 + 5}) {
      const Tensor g = Tensor::normal({n}, 0.0, 300.0, gen, t);
      if (n > 8) {  // the extremes of the dtype: tiny and huge squares in one sum
        g.set({3}, t == DType::F16 ? 6e-8 : 1e-30);
        g.set({5}, t == DType::F16 ? 6e4 : 1e30);
      }
      double level_sum = 0.0, scalar_sum = 0.0;
      {
        ScopedIsa at(isa());
        level_sum = norm_pow_sum(g, 2.0);
      }
      {
        ScopedIsa at(IsaLevel::Scalar);
        scalar_sum = norm_pow_sum(g, 2.0);
      }
      EXPECT_EQ(std::bit_cast<uint64_t>(level_sum), std::bit_cast<uint64_t>(scalar_sum))
          << dtype_name(t) << " n " << n << ": " << level_sum << " vs " << scalar_sum;
    }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(OptimKernel);

TEST(StochasticRounding, GivesOneOfTheTwoNeighbours) {
  Generator gen(5);
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = static_cast<float>(gen.normal() * std::ldexp(1.0, i % 40 - 30));
      const float r = round_stochastic(x, dtype, gen.next_u32());
      // The neighbours below and above |x| in the 16-bit format.
      const Tensor t = Tensor::full({1}, x, DType::F32);
      const double nearest = t.to(dtype).value({0});
      EXPECT_TRUE(Tensor::full({1}, r).to(dtype).value({0}) == r) << "not representable: " << r;
      // r and the nearest-even result are the same value or adjacent 16-bit values.
      if (r != nearest) {
        const double lo = std::min<double>(r, nearest), hi = std::max<double>(r, nearest);
        EXPECT_TRUE(lo <= x && x <= hi) << x << " rounded to " << r << ", nearest " << nearest;
      }
    }
  }
}

TEST(StochasticRounding, InfNanAndZerosPassThrough) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    EXPECT_EQ(round_stochastic(INFINITY, dtype, 0xFFFFFFFFu), INFINITY);
    EXPECT_EQ(round_stochastic(-INFINITY, dtype, 0xFFFFFFFFu), -INFINITY);
    EXPECT_TRUE(std::isnan(round_stochastic(NAN, dtype, 0xFFFFFFFFu)));
    EXPECT_TRUE(std::signbit(round_stochastic(-0.0f, dtype, 0xFFFFFFFFu)));
  }
  EXPECT_EQ(round_stochastic(70000.0f, DType::F16, 0), INFINITY) << "beyond f16's range";
  EXPECT_NE(test_support::error_of([] {
              round_stochastic(1.0f, DType::F32, 0);
            }).find("[round_stochastic]"),
            std::string::npos);
}

// Unbiasedness. Each element of x = lo + f * ulp rounds up with probability f, independently
// (different element indices hash to independent bits), so the mean of N rounded values is
// lo + ulp * B / N with B ~ Binomial(N, f): mean - x has expectation 0 (plus the f16 rule's
// bias of at most 2^-24 ulp, and none for bf16) and standard deviation
// sigma = ulp * sqrt(f (1 - f) / N). We allow 5 sigma (a false failure has probability
// ~6e-7 per check) plus the bias bound.
TEST(StochasticRounding, MeanOverManyElementsIsTheExactValue) {
  const int64_t n = 200000;
  struct Probe {
    DType dtype;
    double near;  // lo is the 16-bit value nearest to this
    double ulp;   // the spacing above |lo|
  };
  const Probe probes[] = {{DType::BF16, 1.0, 0x1p-7},     {DType::BF16, -3.0, 0x1p-6},
                          {DType::BF16, 1e-40, 0x1p-133}, {DType::F16, 1.0, 0x1p-10},
                          {DType::F16, -1000.0, 0.5},     {DType::F16, 3.0e-6, 0x1p-24},
                          {DType::F16, 0.0, 0x1p-24}};
  for (const Probe& probe : probes) {
    const double lo = Tensor::full({1}, probe.near).to(probe.dtype).value({0});
    // f in 2^-10 steps keeps every probe an exact f32.
    for (double f : {1.0 / 1024, 103.0 / 1024, 379.0 / 1024, 0.5, 921.0 / 1024}) {
      // Away from zero: the rounding works on |x|.
      const double x = lo + std::copysign(f * probe.ulp, lo == 0 ? 1.0 : lo);
      SCOPED_TRACE(std::string(dtype_name(probe.dtype)) + " x = " + std::to_string(x) +
                   " f = " + std::to_string(f));
      ASSERT_EQ(static_cast<double>(static_cast<float>(x)), x) << "the probe must be an exact f32";
      OptimOperands ops;
      ops.param = Tensor::zeros({n}, probe.dtype);
      ops.grad = Tensor::zeros({n});
      ops.master = Tensor::full({n}, x);
      ops.rounding = Rounding::Stochastic;
      ops.stream = {.seed = 1234, .step = 1, .param_index = 0};
      sgd_step({.lr = 0.0}, ops);
      double sum = 0.0;
      for (double v : test_support::values_of(ops.param)) sum += v;
      const double mean = sum / static_cast<double>(n);
      const double sigma = probe.ulp * std::sqrt(f * (1.0 - f) / static_cast<double>(n));
      EXPECT_NEAR(mean, x, 5.0 * sigma + probe.ulp * 0x1p-24);
      // And it is really random: neither always down nor always up.
      EXPECT_NE(mean, lo);
      EXPECT_NE(mean, lo + std::copysign(probe.ulp, lo == 0 ? 1.0 : lo));
    }
  }
}

// The same element over many steps (trials): the stream changes with the step, so the mean
// over T steps converges to x too (same bound with N = T).
TEST(StochasticRounding, MeanOverStepsIsTheExactValue) {
  const int64_t trials = 20000;
  const double f = 0.3, ulp = 0x1p-7, x = 2.0 + 2 * f * ulp;  // bf16 ulp at 2 is 2^-6
  double sum = 0.0;
  for (int64_t t = 1; t <= trials; ++t)
    sum += round_stochastic(
        static_cast<float>(x), DType::BF16,
        stochastic_bits({.seed = 8, .step = static_cast<uint64_t>(t), .param_index = 1}, 17));
  const double sigma = 2 * ulp * std::sqrt(f * (1 - f) / static_cast<double>(trials));
  EXPECT_NEAR(sum / static_cast<double>(trials), x, 5.0 * sigma);
}

TEST(StochasticRounding, SameBitsForAnyThreadCount) {
  const int64_t n = 5 * (int64_t{1} << 14) + 3;
  auto run = [&](int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    OptimOperands ops = make_operands({DType::BF16, DType::F32, true, Rounding::Stochastic}, n, 4);
    adam_step({.lr = 1e-3, .step = 2}, ops);
    set_num_threads(before);
    return outputs(ops);
  };
  EXPECT_TRUE(run(1) == run(std::max(2, num_threads())));
}

TEST(OptimKernelChecks, ClearErrors) {
  OptimOperands ops = make_operands({DType::F32, DType::F32, false, Rounding::NearestEven}, 8, 1);
  ops.state1 = Tensor::zeros({9});
  EXPECT_NE(test_support::error_of([&] {
              adam_step({}, ops);
            }).find("[adam_step] state1 has shape [9], expected [8]"),
            std::string::npos);
  ops = make_operands({DType::F32, DType::F32, false, Rounding::NearestEven}, 8, 1);
  ops.master = Tensor::zeros({8});
  EXPECT_NE(test_support::error_of([&] { adam_step({}, ops); }).find("master weights are for"),
            std::string::npos);
  ops = make_operands({DType::BF16, DType::F32, true, Rounding::NearestEven}, 8, 1);
  ops.state0 = Tensor::zeros({8}, DType::BF16);
  EXPECT_NE(test_support::error_of([&] {
              adam_step({}, ops);
            }).find("[adam_step] state0 has dtype bf16, expected f32"),
            std::string::npos);
  EXPECT_NE(test_support::error_of([&] { adam_step({.step = 0}, ops); }).find("step must be >= 1"),
            std::string::npos);
}

// A gradient laid out differently from its parameter is staged, not misread.
TEST(OptimKernelChecks, TransposedGradientIsStaged) {
  Generator gen(2);
  const Tensor w = Tensor::randn({3, 5}, gen);
  const Tensor g_rows = Tensor::randn({5, 3}, gen);
  OptimOperands a, b;
  a.param = w.clone();
  a.grad = g_rows.t();  // [3, 5], column-major
  b.param = w.clone();
  b.grad = g_rows.t().contiguous();
  sgd_step({.lr = 0.1}, a);
  sgd_step({.lr = 0.1}, b);
  EXPECT_TRUE(bytes_of(a.param) == bytes_of(b.param));
}

TEST(NormPowSum, HandComputed) {
  const Tensor g = Tensor::from_vector<float>({3, -4, 0, 12});
  EXPECT_EQ(norm_pow_sum(g, 2.0), 169.0);
  EXPECT_EQ(norm_pow_sum(g, 1.0), 19.0);
  EXPECT_EQ(norm_pow_sum(g, INFINITY), 12.0);
  EXPECT_DOUBLE_EQ(norm_pow_sum(g, 3.0), 27.0 + 64.0 + 1728.0);
  // f64 accumulation: 100,000 bf16 ones sum to exactly 100,000 (bf16 accumulation stalls at 256).
  EXPECT_EQ(norm_pow_sum(Tensor::ones({100000}, DType::BF16), 2.0), 100000.0);
  const Tensor with_nan = Tensor::from_vector<float>({1, NAN, 2});
  EXPECT_TRUE(std::isnan(norm_pow_sum(with_nan, INFINITY)));
  EXPECT_TRUE(std::isnan(norm_pow_sum(with_nan, 2.0)));
}

}  // namespace
}  // namespace mixprec::kernels
