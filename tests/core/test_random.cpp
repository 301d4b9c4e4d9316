// The counter-based generator: known answers, reproducibility, state save/restore, and the
// random tensor factories' determinism across seeds, ISA levels and thread counts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "support/isa_levels.h"

namespace mixprec {
namespace {

using ::testing::HasSubstr;

// Raw bytes of a tensor's elements (contiguous tensors only), to compare bit for bit.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  EXPECT_TRUE(t.is_contiguous());
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return {p, p + t.nbytes()};
}

// The three philox4x32 R=10 lines of Random123's kat_vectors (counter, key -> output).
TEST(Philox, KnownAnswers) {
  using W4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (W4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (W4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (W4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Generator, StreamIsPhiloxBlocksInOrder) {
  Generator gen(0x0123456789ABCDEFull);
  const auto b0 = philox4x32_10({0, 0, 0, 0}, {0x89ABCDEFu, 0x01234567u});
  const auto b1 = philox4x32_10({1, 0, 0, 0}, {0x89ABCDEFu, 0x01234567u});
  for (uint32_t w : b0) EXPECT_EQ(gen.next_u32(), w);
  EXPECT_EQ(gen.next_u64(), b1[0] | (uint64_t{b1[1]} << 32));
  EXPECT_EQ(gen.state().offset, 6u);
}

TEST(Generator, SameSeedSameNumbersDifferentSeedDifferent) {
  Generator a(7), b(7), c(8);
  std::vector<uint32_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
}

// Pins the stream so an accidental change to the algorithm or its word order shows up.
TEST(Generator, GoldenValuesForSeed42) {
  Generator gen(42);
  const auto block0 = philox4x32_10({0, 0, 0, 0}, {42, 0});
  EXPECT_EQ(gen.next_u32(), block0[0]);
  gen.manual_seed(42);
  EXPECT_EQ(gen.uniform(), static_cast<float>(block0[0] >> 8) * 0x1p-24f);
}

TEST(Generator, StateRestoreReplaysTheSameNumbers) {
  Generator gen(123);
  gen.next_u32();  // mid-block, to check restore is exact at any offset
  const GeneratorState saved = gen.state();
  const float u = gen.uniform();
  const float z = gen.normal();
  const Tensor r = Tensor::randn({17}, gen);
  gen.set_state(saved);
  EXPECT_EQ(gen.uniform(), u);
  EXPECT_EQ(gen.normal(), z);
  EXPECT_EQ(bytes_of(Tensor::randn({17}, gen)), bytes_of(r));
}

TEST(Generator, UniformInUnitInterval) {
  Generator gen(1);
  for (int i = 0; i < 100000; ++i) {
    const float u = gen.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    const double d = gen.uniform_double();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(Generator, ScalarDrawsMatchTensorElementZero) {
  Generator a(99), b(99);
  EXPECT_EQ(a.uniform(), Tensor::rand({1}, b).item<float>());
  a.manual_seed(99);
  b.manual_seed(99);
  EXPECT_EQ(a.normal(), Tensor::randn({1}, b).item<float>());
}

TEST(Generator, ReserveBlocksStartsAtABlockBoundary) {
  Generator gen(5);
  EXPECT_EQ(gen.reserve_blocks(2), 0u);
  EXPECT_EQ(gen.state().offset, 8u);
  gen.next_u32();                        // offset 9, inside block 2
  EXPECT_EQ(gen.reserve_blocks(1), 3u);  // rounds up past the partly used block
  EXPECT_EQ(gen.state().offset, 16u);
}

TEST(Generator, ForkIsDeterministicAndIndependent) {
  Generator a(11), b(11);
  Generator fa = a.fork(), fb = b.fork();
  EXPECT_EQ(fa.seed(), fb.seed());
  EXPECT_NE(fa.seed(), a.seed());
  EXPECT_EQ(fa.next_u64(), fb.next_u64());
  Generator fa2 = a.fork();
  EXPECT_NE(fa2.seed(), fa.seed());
  EXPECT_NE(fa2.next_u64(), a.next_u64());
}

TEST(Generator, GlobalManualSeedReproduces) {
  manual_seed(2024);
  const Tensor x = Tensor::rand({50});
  const Tensor y = Tensor::randn({50}, DType::BF16);
  manual_seed(2024);
  EXPECT_EQ(bytes_of(Tensor::rand({50})), bytes_of(x));
  EXPECT_EQ(bytes_of(Tensor::randn({50}, DType::BF16)), bytes_of(y));
  EXPECT_EQ(default_generator().seed(), 2024u);
}

TEST(Generator, DefaultGeneratorIsSafeAcrossThreads) {
  manual_seed(17);
  auto draw = [] {
    for (int i = 0; i < 50; ++i) Tensor::rand({100});  // 25 blocks = 100 words each
  };
  std::thread a(draw), b(draw);
  a.join();
  b.join();
  EXPECT_EQ(default_generator().state().offset, 100u * 100u);  // no reservation lost
}

TEST(RandomTensor, SameSeedSameBitsDifferentSeedDifferentBits) {
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator a(3), b(3), c(4);
    const Tensor ra = Tensor::rand({1001}, a, dtype), rb = Tensor::rand({1001}, b, dtype);
    const Tensor rc = Tensor::rand({1001}, c, dtype);
    EXPECT_EQ(ra.dtype(), dtype);
    EXPECT_EQ(bytes_of(ra), bytes_of(rb));
    EXPECT_NE(bytes_of(ra), bytes_of(rc));
    const Tensor na = Tensor::randn({1001}, a, dtype), nb = Tensor::randn({1001}, b, dtype);
    EXPECT_EQ(bytes_of(na), bytes_of(nb));
    EXPECT_NE(bytes_of(na), bytes_of(ra));
  }
}

TEST(RandomTensor, SixteenBitResultsAreTheF32DrawRoundedOnce) {
  Generator a(21), b(21);
  const Tensor f32 = Tensor::randn({4096}, a, DType::F32);
  const Tensor bf16 = Tensor::randn({4096}, b, DType::BF16);
  const float* x = f32.data<float>();
  const BFloat16* y = bf16.data<BFloat16>();
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(y[i].bits, fp16_bits::f32_to_bf16(x[i])) << i;
}

// Each kernel level against the scalar reference; a level this CPU lacks is reported skipped.
class RandomIsaTest : public test_support::IsaTest {};

TEST_P(RandomIsaTest, BitIdenticalToScalar) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    // 100003: an odd length with tails for every vector width.
    auto draw = [dtype](std::vector<uint8_t>& r, std::vector<uint8_t>& n) {
      Generator gen(77);
      r = bytes_of(Tensor::rand({100003}, gen, dtype));
      n = bytes_of(Tensor::randn({100003}, gen, dtype));
    };
    std::vector<uint8_t> r, n, rand_ref, randn_ref;
    draw(r, n);
    {
      const ScopedIsa scalar(IsaLevel::Scalar);
      draw(rand_ref, randn_ref);
    }
    EXPECT_EQ(r, rand_ref);
    EXPECT_EQ(n, randn_ref);
  }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(RandomIsaTest);

TEST(RandomTensor, IndependentOfThreadCount) {
  const int saved = num_threads();
  set_num_threads(1);
  Generator a(9);
  const auto one = bytes_of(Tensor::randn({1 << 20}, a));
  set_num_threads(2);
  Generator b(9);
  const auto two = bytes_of(Tensor::randn({1 << 20}, b));
  set_num_threads(saved);
  EXPECT_EQ(one, two);
}

// Mean and variance of 10^6 draws; tolerances are ~5 standard errors.
TEST(RandomTensor, NormalAndUniformStatistics) {
  constexpr int64_t n = 1000000;
  Generator gen(31337);
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor z = Tensor::randn({n}, gen, dtype).to(DType::F64);
    const Tensor u = Tensor::rand({n}, gen, dtype).to(DType::F64);
    double zs = 0, zs2 = 0, us = 0, us2 = 0, umin = 1, umax = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double zi = z.data<double>()[i], ui = u.data<double>()[i];
      zs += zi;
      zs2 += zi * zi;
      us += ui;
      us2 += ui * ui;
      umin = std::min(umin, ui);
      umax = std::max(umax, ui);
    }
    const double zmean = zs / n, zvar = zs2 / n - zmean * zmean;
    const double umean = us / n, uvar = us2 / n - umean * umean;
    EXPECT_NEAR(zmean, 0.0, 0.005);
    EXPECT_NEAR(zvar, 1.0, 0.01);
    // k / 2^bits for k uniform in [0, 2^bits): the mean sits half a step below 0.5.
    const double step =
        dtype == DType::F64 ? 0.0 : std::ldexp(1.0, -(info(dtype).mantissa_bits + 1));
    EXPECT_NEAR(umean, 0.5 - step / 2, 0.0015);
    EXPECT_NEAR(uvar, 1.0 / 12.0, 0.0015);
    EXPECT_GE(umin, 0.0);
    EXPECT_LT(umax, 1.0);
  }
}

TEST(RandomTensor, UniformAndNormalParameters) {
  Generator a(5), b(5);
  const Tensor u = Tensor::uniform({1000}, -2.0, 3.0, a);
  const Tensor r = Tensor::rand({1000}, b);
  for (int i = 0; i < 1000; ++i) {
    const float v = u.data<float>()[i];
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
    ASSERT_EQ(v, static_cast<float>(-2.0 + 5.0 * r.data<float>()[i]));
  }
  a.manual_seed(6);
  b.manual_seed(6);
  const Tensor n = Tensor::normal({1000}, 10.0, 0.5, a);
  const Tensor z = Tensor::randn({1000}, b, DType::F64);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(n.data<float>()[i], static_cast<float>(10.0 + 0.5 * z.data<double>()[i]));
}

TEST(RandomTensor, BadArgumentsThrow) {
  Generator gen;
  try {
    Tensor::rand({3}, gen, DType::I32);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("[rand] expected a floating dtype"));
    EXPECT_THAT(e.what(), HasSubstr("i32"));
  }
  EXPECT_THROW(Tensor::uniform({3}, 2.0, 1.0, gen), Error);
  EXPECT_THROW(Tensor::normal({3}, 0.0, -1.0, gen), Error);
  EXPECT_THROW(Tensor::randn({-1}, gen), Error);
}

TEST(RandomTensor, EmptyShapesWork) {
  Generator gen(1);
  EXPECT_EQ(Tensor::rand({0, 3}, gen).numel(), 0);
  EXPECT_EQ(Tensor::randn({}, gen).dim(), 0);
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

TEST(RandomTensor, SixteenBitRandStaysBelowOne) {
  // 24-bit draws rounded to bf16 reach 1.0 about once in 500; the dtype-width draw never does.
  Generator gen(77);
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    const Tensor r = Tensor::rand({20000}, gen, t).to(DType::F64);
    const double* v = r.data<double>();
    double hi = 0.0;
    for (int64_t i = 0; i < 20000; ++i) hi = std::max(hi, v[i]);
    EXPECT_LT(hi, 1.0) << dtype_name(t);
    EXPECT_GT(hi, 0.99) << dtype_name(t);
  }
}

}  // namespace
}  // namespace mixprec
