// The scalar conversion rules of core/float16.h (the numerics contract for conversions),
// checked against the independent reference in tests/support/fp_reference.h, and the single
// rounding of f64 and integers to 16 bits (kernels/convert.h), with the hard cases that double
// rounding through f32 gets wrong as separate tests.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mixprec/core/float16.h"
#include "mixprec/kernels/convert.h"
#include "support/fp_reference.h"

namespace {

using mixprec::BFloat16;
using mixprec::DType;
using mixprec::Half;
using mixprec::test_support::Format16;
namespace fp16_bits = mixprec::fp16_bits;

float f32(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

// How many random f32 the random test draws: 10 million unless MIXPREC_TEST_RANDOM_COUNT says
// otherwise (a sanitizer run may scale it down; it takes ~1 s in Release).
std::size_t random_count() {
  const char* env = std::getenv("MIXPREC_TEST_RANDOM_COUNT");
  return env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : 10'000'000;
}

// Collects mismatches and reports the first few (a broken rule would otherwise print millions).
class Mismatches {
 public:
  explicit Mismatches(const char* what) : what_(what) {}
  void check(uint64_t input, uint64_t got, uint64_t want) {
    ++checked_;
    if (got == want) return;
    if (++count_ <= 8)
      ADD_FAILURE() << what_ << ": input " << hex(input) << " gave " << hex(got) << ", expected "
                    << hex(want);
  }
  ~Mismatches() {
    EXPECT_EQ(count_, 0u) << what_ << ": " << count_ << " mismatches in " << checked_ << " inputs";
  }

 private:
  const char* what_;
  std::size_t count_ = 0, checked_ = 0;
};

// ---- 16 bits -> f32 -> 16 bits --------------------------------------------------------------

void check_round_trip(const Format16& format, float (*widen)(uint16_t), uint16_t (*narrow)(float),
                      const char* what) {
  Mismatches widening(what), round_trip(what);
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = widen(h);
    widening.check(h, bits_of(f), format.to_f32_bits(h));
    // A NaN comes back as the same NaN, quiet: same sign, same payload, quiet bit set.
    const uint16_t want = format.is_nan(h) ? static_cast<uint16_t>(h | format.quiet_bit()) : h;
    round_trip.check(h, narrow(f), want);
  }
}

TEST(Float16RoundTrip, EveryHalfPatternThroughF32IsIdentity) {
  check_round_trip(Format16::f16(), fp16_bits::f16_to_f32, fp16_bits::f32_to_f16, "f16");
}

TEST(Float16RoundTrip, EveryBFloat16PatternThroughF32IsIdentity) {
  check_round_trip(Format16::bf16(), fp16_bits::bf16_to_f32, fp16_bits::f32_to_bf16, "bf16");
}

TEST(Float16RoundTrip, WideningQuietsSignalingNaNs) {
  EXPECT_EQ(bits_of(fp16_bits::f16_to_f32(0x7C01)), 0x7FC02000u);
  EXPECT_EQ(bits_of(fp16_bits::f16_to_f32(0xFD55)), 0xFFEAA000u);
  EXPECT_EQ(bits_of(fp16_bits::bf16_to_f32(0x7F81)), 0x7FC10000u);
  EXPECT_EQ(bits_of(fp16_bits::bf16_to_f32(0xFF80)), 0xFF800000u);  // -inf is no NaN
}

// ---- f32 -> 16 bits against the exact reference ----------------------------------------------

// Every f32 within +-2 ulp of every 16-bit value and of every midpoint (rounding boundary)
// between neighbours, both signs.
void check_neighbourhoods(const Format16& format, uint16_t (*narrow)(float), const char* what) {
  Mismatches mismatches(what);
  for (uint32_t k = 0; k <= format.max_finite_bits(); ++k) {
    for (const double centre : {format.magnitude(static_cast<uint16_t>(k)),
                                format.midpoint_above(static_cast<uint16_t>(k))}) {
      const float c = static_cast<float>(centre);
      ASSERT_EQ(static_cast<double>(c), centre) << "16-bit values and midpoints are f32-exact";
      for (int d = -2; d <= 2; ++d) {
        if (bits_of(c) == 0 && d < 0) continue;  // below +0 is the negative side, tested below
        for (const uint32_t sign : {0u, 0x80000000u}) {
          const uint32_t u = (bits_of(c) + static_cast<uint32_t>(d)) | sign;
          mismatches.check(u, narrow(f32(u)), format.from_f32(f32(u)));
        }
      }
    }
  }
}

TEST(F32ToHalf, WithinTwoUlpOfEveryValueAndMidpoint) {
  check_neighbourhoods(Format16::f16(), fp16_bits::f32_to_f16, "f32->f16");
}

TEST(F32ToBFloat16, WithinTwoUlpOfEveryValueAndMidpoint) {
  check_neighbourhoods(Format16::bf16(), fp16_bits::f32_to_bf16, "f32->bf16");
}

TEST(F32To16Bit, RandomF32MatchReference) {
  const std::size_t n = random_count();
  std::mt19937_64 rng(20261122);
  const Format16& f16 = Format16::f16();
  const Format16& bf16 = Format16::bf16();
  Mismatches to_f16("f32->f16"), to_bf16("f32->bf16");
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    uint32_t u = static_cast<uint32_t>(r);
    // Every other draw lands in f16's interesting range (exponents 2^-25 .. 2^16); uniform
    // bits alone mostly give values f16 flushes to zero or infinity.
    if (i & 1) u = (u & 0x807FFFFFu) | ((102u + static_cast<uint32_t>(r >> 32) % 42u) << 23);
    const float x = f32(u);
    to_f16.check(u, fp16_bits::f32_to_f16(x), f16.from_f32(x));
    to_bf16.check(u, fp16_bits::f32_to_bf16(x), bf16.from_f32(x));
  }
}

TEST(F32ToHalf, OverflowBoundaries) {
  EXPECT_EQ(fp16_bits::f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_bits::f32_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(fp16_bits::f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(fp16_bits::f32_to_f16(65520.0f), 0x7C00);  // the midpoint to 2^16 ties "to even"
  EXPECT_EQ(fp16_bits::f32_to_f16(-65520.0f), 0xFC00);
  EXPECT_EQ(fp16_bits::f32_to_f16(-65519.99f), 0xFBFF);
  EXPECT_EQ(fp16_bits::f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(fp16_bits::f32_to_f16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(fp16_bits::f32_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(fp16_bits::f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(Format16::f16().overflow_threshold(), 65520.0);
}

TEST(F32ToBFloat16, OverflowBoundaries) {
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x7F7F7FFF)), 0x7F7F);  // just below the threshold
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x7F7F8000)), 0x7F80);  // 2^128 - 2^119: tie -> inf
  EXPECT_EQ(fp16_bits::f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(fp16_bits::f32_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(fp16_bits::f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(Format16::bf16().overflow_threshold(), std::ldexp(1.0, 128) - std::ldexp(1.0, 119));
}

TEST(F32ToHalf, SmallestSubnormalsAndBelow) {
  const float denorm_min = 0x1p-24f;
  EXPECT_EQ(fp16_bits::f32_to_f16(denorm_min), 0x0001);
  EXPECT_EQ(fp16_bits::f32_to_f16(0x1p-25f), 0x0000);  // half of it: a tie, to even zero
  EXPECT_EQ(fp16_bits::f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(fp16_bits::f32_to_f16(std::nextafter(0x1p-25f, 0.0f)), 0x0000);
  EXPECT_EQ(fp16_bits::f32_to_f16(1.5f * denorm_min), 0x0002);  // tie, to even 2
  EXPECT_EQ(fp16_bits::f32_to_f16(2.5f * denorm_min), 0x0002);  // tie, to even 2
  EXPECT_EQ(fp16_bits::f32_to_f16(-denorm_min), 0x8001);
  EXPECT_EQ(fp16_bits::f32_to_f16(-0x1p-26f), 0x8000);        // underflow keeps the sign
  EXPECT_EQ(fp16_bits::f32_to_f16(f32(0x00000001)), 0x0000);  // an f32 subnormal
  EXPECT_EQ(fp16_bits::f32_to_f16(0x1p-14f), 0x0400);         // min normal
  EXPECT_EQ(fp16_bits::f32_to_f16(std::nextafter(0x1p-14f, 0.0f)), 0x0400);  // rounds up to it
  EXPECT_EQ(fp16_bits::f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // tie 0x3FF/0x400 -> even
  EXPECT_EQ(fp16_bits::f32_to_f16(0x1p-14f - 0x1p-24f), 0x03FF);  // largest subnormal
}

TEST(F32ToBFloat16, F32SubnormalsAreKept) {
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x00000001)), 0x0000);
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x00010000)), 0x0001);  // bf16's denorm_min, 2^-133
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x00008000)), 0x0000);  // tie, to even zero
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x00018000)), 0x0002);  // tie, to even 2
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x007FFFFF)), 0x0080);  // rounds up to the min normal
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x807F0000)), 0x807F);
}

TEST(F32To16Bit, NegativeZero) {
  EXPECT_EQ(fp16_bits::f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(fp16_bits::f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(fp16_bits::f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(bits_of(fp16_bits::bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16_bits::f32_to_f16(0.0f), 0x0000);
}

// Every f32 NaN (2^24 - 2 patterns): a quiet NaN, same sign, top payload bits kept.
void check_every_nan(const Format16& format, uint16_t (*narrow)(float), const char* what) {
  Mismatches mismatches(what);
  for (const uint32_t sign : {0u, 0x80000000u})
    for (uint32_t payload = 1; payload <= 0x007FFFFFu; ++payload) {
      const uint32_t u = sign | 0x7F800000u | payload;
      mismatches.check(u, narrow(f32(u)), format.from_f32(f32(u)));
    }
}

TEST(F32ToHalf, EveryNaNPayloadGivesQuietNaNWithTopPayloadBits) {
  check_every_nan(Format16::f16(), fp16_bits::f32_to_f16, "f32 NaN->f16");
  EXPECT_EQ(fp16_bits::f32_to_f16(f32(0x7F800001)), 0x7E00);  // payload only in low bits
  EXPECT_EQ(fp16_bits::f32_to_f16(f32(0xFFFFFFFF)), 0xFFFF);
  EXPECT_EQ(fp16_bits::f32_to_f16(f32(0x7F812345)), 0x7E09);
}

TEST(F32ToBFloat16, EveryNaNPayloadGivesQuietNaNWithTopPayloadBits) {
  check_every_nan(Format16::bf16(), fp16_bits::f32_to_bf16, "f32 NaN->bf16");
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x7F800001)), 0x7FC0);
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0x7F812345)), 0x7FC1);
  EXPECT_EQ(fp16_bits::f32_to_bf16(f32(0xFF80FFFF)), 0xFFC0);  // never rounds into the exponent
}

// ---- f64 and integers -> 16 bits: one rounding -----------------------------------------------

template <typename From>
uint16_t convert_to(DType to, From value) {
  uint16_t out = 0;
  mixprec::kernels::convert(&value, mixprec::dtype_of<From>, &out, to, 1);
  return out;
}

// A hard case: the right answer differs from rounding through f32 first.
template <typename From>
void expect_single_rounding(DType to, From value, uint16_t want) {
  const Format16& format = to == DType::F16 ? Format16::f16() : Format16::bf16();
  if constexpr (std::is_floating_point_v<From>)
    ASSERT_EQ(format.from_f64(value), want) << "reference disagrees with the stated answer";
  else
    ASSERT_EQ(format.from_i64(value), want) << "reference disagrees with the stated answer";
  const float through_f32 = static_cast<float>(value);
  const uint16_t naive =
      to == DType::F16 ? fp16_bits::f32_to_f16(through_f32) : fp16_bits::f32_to_bf16(through_f32);
  EXPECT_NE(naive, want) << "not a hard case: double rounding gets it right too";
  EXPECT_EQ(convert_to(to, value), want);
  EXPECT_EQ(convert_to(to, -value), static_cast<uint16_t>(want | 0x8000u));
}

TEST(F64ToHalf, JustAboveMidpointRoundsUpNotToEven) {
  // 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10; f32 drops the 2^-52 and then ties to 1.
  expect_single_rounding(DType::F16, 1.0 + 0x1p-11 + 0x1p-52, 0x3C01);
}

TEST(F64ToHalf, JustBelowMidpointRoundsDownNotToEven) {
  // 1 + 3 * 2^-11 is the midpoint of 0x3C01 and 0x3C02; f32 rounds up onto it, then to even.
  expect_single_rounding(DType::F16, 1.0 + 3 * 0x1p-11 - 0x1p-52, 0x3C01);
}

TEST(F64ToHalf, JustBelowOverflowThresholdStaysFinite) {
  // f32 rounds 65520 - 2^-30 up to 65520, which then overflows.
  expect_single_rounding(DType::F16, 65520.0 - 0x1p-30, 0x7BFF);
}

TEST(F64ToHalf, JustAboveHalfTheSmallestSubnormalRoundsUp) {
  // 2^-25 is the midpoint of 0 and f16's denorm_min; f32 drops the 2^-60 and ties to zero.
  expect_single_rounding(DType::F16, 0x1p-25 + 0x1p-60, 0x0001);
}

TEST(F64ToBFloat16, JustAboveMidpointRoundsUpNotToEven) {
  expect_single_rounding(DType::BF16, 1.0 + 0x1p-8 + 0x1p-40, 0x3F81);
}

TEST(F64ToBFloat16, JustBelowMidpointRoundsDownNotToEven) {
  // 1 + 3 * 2^-8 is the midpoint of 0x3F81 and 0x3F82.
  expect_single_rounding(DType::BF16, 1.0 + 3 * 0x1p-8 - 0x1p-40, 0x3F81);
}

TEST(F64ToBFloat16, JustBelowOverflowThresholdStaysFinite) {
  // 2^128 - 2^119 is bf16's overflow threshold and an f32 value; f32 rounds onto it.
  expect_single_rounding(DType::BF16, std::ldexp(1.0, 128) - std::ldexp(1.0, 119) - 0x1p80, 0x7F7F);
}

TEST(F64ToBFloat16, JustAboveHalfTheSmallestSubnormalRoundsUp) {
  expect_single_rounding(DType::BF16, 0x1p-134 + 0x1p-160, 0x0001);
}

TEST(F64To16Bit, OutOfF32RangeAndSpecials) {
  for (const DType to : {DType::F16, DType::BF16}) {
    const uint16_t inf = to == DType::F16 ? 0x7C00 : 0x7F80;
    EXPECT_EQ(convert_to(to, 1e39), inf);
    EXPECT_EQ(convert_to(to, -1e300), inf | 0x8000);
    EXPECT_EQ(convert_to(to, static_cast<double>(INFINITY)), inf);
    EXPECT_EQ(convert_to(to, 0.0), 0x0000);
    EXPECT_EQ(convert_to(to, -0.0), 0x8000);
    EXPECT_EQ(convert_to(to, 1e-300), 0x0000);
    EXPECT_EQ(convert_to(to, -std::numeric_limits<double>::denorm_min()), 0x8000);
  }
}

TEST(F64To16Bit, NaNKeepsTopPayloadBitsAndIsQuiet) {
  for (const uint64_t u : {0x7FF0000000000001ull, 0x7FF8000000000000ull, 0xFFF4000000000000ull,
                           0x7FF123456789ABCDull, 0xFFFFFFFFFFFFFFFFull}) {
    const double d = std::bit_cast<double>(u);
    EXPECT_EQ(convert_to(DType::F16, d), Format16::f16().from_f64(d)) << hex(u);
    EXPECT_EQ(convert_to(DType::BF16, d), Format16::bf16().from_f64(d)) << hex(u);
  }
  EXPECT_EQ(convert_to(DType::F16, std::bit_cast<double>(0x7FF123456789ABCDull)), 0x7E48);
  EXPECT_EQ(convert_to(DType::BF16, std::bit_cast<double>(0x7FF123456789ABCDull)), 0x7FC9);
}

// Every midpoint of the target, and the doubles right next to it, both signs, in one bulk call.
void check_f64_near_midpoints(DType to) {
  const Format16& format = to == DType::F16 ? Format16::f16() : Format16::bf16();
  std::vector<double> inputs;
  for (uint32_t k = 0; k <= format.max_finite_bits(); ++k) {
    const double m = format.midpoint_above(static_cast<uint16_t>(k));
    for (const double x : {std::nextafter(m, 0.0), m, std::nextafter(m, INFINITY)}) {
      inputs.push_back(x);
      inputs.push_back(-x);
    }
  }
  std::vector<uint16_t> out(inputs.size());
  mixprec::kernels::convert(inputs.data(), DType::F64, out.data(), to, inputs.size());
  Mismatches mismatches(to == DType::F16 ? "f64->f16" : "f64->bf16");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    mismatches.check(std::bit_cast<uint64_t>(inputs[i]), out[i], format.from_f64(inputs[i]));
}

TEST(F64ToHalf, EveryMidpointAndItsNeighbours) { check_f64_near_midpoints(DType::F16); }
TEST(F64ToBFloat16, EveryMidpointAndItsNeighbours) { check_f64_near_midpoints(DType::BF16); }

TEST(I32ToBFloat16, AboveMidpointRoundsUpNotToEven) {
  // 2^24 + 2^16 is the midpoint of bf16 2^24 and 2^24 + 2^17; f32 rounds the +1 away (tie,
  // to even) onto it, and then to even 2^24.
  expect_single_rounding(DType::BF16, int32_t{(1 << 24) + (1 << 16) + 1}, 0x4B81);
}

TEST(I32ToBFloat16, BelowMidpointRoundsDownNotToEven) {
  // 2^24 + 3 * 2^16 is the midpoint of 0x4B81 and 0x4B82.
  expect_single_rounding(DType::BF16, int32_t{(1 << 24) + 3 * (1 << 16) - 1}, 0x4B81);
}

TEST(I64ToBFloat16, AboveMidpointRoundsUpNotToEven) {
  expect_single_rounding(DType::BF16, (int64_t{1} << 40) + (int64_t{1} << 32) + 1, 0x5381);
}

TEST(I64ToBFloat16, LimitsRoundToNearest) {
  EXPECT_EQ(convert_to(DType::BF16, std::numeric_limits<int64_t>::max()), 0x5F00);  // 2^63
  EXPECT_EQ(convert_to(DType::BF16, std::numeric_limits<int64_t>::min()), 0xDF00);
  EXPECT_EQ(convert_to(DType::BF16, int64_t{0}), 0x0000);  // +0, never -0
}

TEST(I64ToHalf, OverflowAtTheF32Threshold) {
  EXPECT_EQ(convert_to(DType::F16, int64_t{65519}), 0x7BFF);
  EXPECT_EQ(convert_to(DType::F16, int64_t{65520}), 0x7C00);
  EXPECT_EQ(convert_to(DType::F16, int64_t{-65520}), 0xFC00);
  EXPECT_EQ(convert_to(DType::F16, std::numeric_limits<int64_t>::max()), 0x7C00);
  EXPECT_EQ(convert_to(DType::F16, std::numeric_limits<int64_t>::min()), 0xFC00);
  EXPECT_EQ(convert_to(DType::F16, int32_t{2049}), 0x6800);  // tie 2048/2050 -> even 2048
  EXPECT_EQ(convert_to(DType::F16, int32_t{2051}), 0x6802);  // tie 2050/2052 -> even 2052
}

// Integers next to every integral midpoint of the target, through i64 and i32, in bulk.
template <typename Int>
void check_ints_near_midpoints(DType to) {
  const Format16& format = to == DType::F16 ? Format16::f16() : Format16::bf16();
  std::vector<Int> inputs;
  const long double limit = static_cast<long double>(std::numeric_limits<Int>::max());
  for (uint32_t k = 0; k <= format.max_finite_bits(); ++k) {
    const long double m = format.midpoint_above(static_cast<uint16_t>(k));
    if (m != std::floor(m) || m + 1 > limit) continue;
    for (int d = -1; d <= 1; ++d) {
      inputs.push_back(static_cast<Int>(m + d));
      inputs.push_back(static_cast<Int>(-(m + d)));
    }
  }
  if (to == DType::F16)  // f16's whole integer range, exhaustively
    for (Int v = -70000; v <= 70000; ++v) inputs.push_back(v);
  std::vector<uint16_t> out(inputs.size());
  mixprec::kernels::convert(inputs.data(), mixprec::dtype_of<Int>, out.data(), to, inputs.size());
  Mismatches mismatches("int->16 bit");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    mismatches.check(static_cast<uint64_t>(inputs[i]), out[i], format.from_i64(inputs[i]));
}

TEST(I64To16Bit, EveryIntegralMidpointAndItsNeighbours) {
  check_ints_near_midpoints<int64_t>(DType::F16);
  check_ints_near_midpoints<int64_t>(DType::BF16);
}

TEST(I32To16Bit, EveryIntegralMidpointAndItsNeighbours) {
  check_ints_near_midpoints<int32_t>(DType::F16);
  check_ints_near_midpoints<int32_t>(DType::BF16);
}

// ---- Half and BFloat16 as types --------------------------------------------------------------

TEST(HalfLimits, MatchTheFormat) {
  const Format16& f16 = Format16::f16();
  EXPECT_EQ(float(Half::max()), 65504.0f);
  EXPECT_EQ(float(Half::lowest()), -65504.0f);
  EXPECT_EQ(float(Half::min_normal()), 0x1p-14f);
  EXPECT_EQ(float(Half::denorm_min()), 0x1p-24f);
  EXPECT_EQ(float(Half::epsilon()), 0x1p-10f);
  EXPECT_EQ(float(Half::infinity()), INFINITY);
  EXPECT_TRUE(std::isnan(float(Half::quiet_nan())));
  EXPECT_EQ(Half::max().bits, f16.max_finite_bits());
  EXPECT_EQ(Half::infinity().bits, f16.infinity_bits());
  EXPECT_EQ(Half::quiet_nan().bits & f16.quiet_bit(), f16.quiet_bit());
  EXPECT_EQ(Half::epsilon().bits, f16.round(0x1p-10));
}

TEST(BFloat16Limits, MatchTheFormat) {
  const Format16& bf16 = Format16::bf16();
  EXPECT_EQ(float(BFloat16::max()), std::ldexp(1.0f, 128 - 8) * 255.0f);  // (2 - 2^-7) 2^127
  EXPECT_EQ(float(BFloat16::lowest()), -float(BFloat16::max()));
  EXPECT_EQ(float(BFloat16::min_normal()), std::numeric_limits<float>::min());
  EXPECT_EQ(float(BFloat16::denorm_min()), 0x1p-133f);
  EXPECT_EQ(float(BFloat16::epsilon()), 0x1p-7f);
  EXPECT_EQ(float(BFloat16::infinity()), INFINITY);
  EXPECT_TRUE(std::isnan(float(BFloat16::quiet_nan())));
  EXPECT_EQ(BFloat16::max().bits, bf16.max_finite_bits());
  EXPECT_EQ(BFloat16::quiet_nan().bits & bf16.quiet_bit(), bf16.quiet_bit());
}

TEST(HalfArithmetic, RoundsOncePerOperation) {
  EXPECT_EQ(float(Half(1.0f) + Half(2.0f)), 3.0f);
  EXPECT_EQ(float(Half(1.5f) * Half(-4.0f)), -6.0f);
  EXPECT_EQ(float(Half(1.0f) / Half(3.0f)), float(Half(1.0f / 3.0f)));
  EXPECT_EQ(float(Half(1.0f) + Half::epsilon()), 1.0f + 0x1p-10f);
  EXPECT_EQ(float(Half(1.0f) + Half(0x1p-11f)), 1.0f);  // a tie, to even
  EXPECT_EQ(float(Half(2049.0f)), 2048.0f);
  Half h(10.0f);
  h += Half(0.5f);
  h *= Half(2.0f);
  h -= Half(1.0f);
  h /= Half(4.0f);
  EXPECT_EQ(float(h), 5.0f);
}

TEST(HalfArithmetic, OverflowUnderflowAndNaN) {
  EXPECT_EQ((Half::max() + Half(16.0f)).bits, 0x7C00);  // 65520: the overflow threshold
  EXPECT_EQ((Half::max() + Half(8.0f)).bits, 0x7BFF);   // 65512 rounds back to the max
  EXPECT_EQ((Half::lowest() - Half(16.0f)).bits, 0xFC00);
  EXPECT_EQ((Half::denorm_min() * Half(0.5f)).bits, 0x0000);  // a tie, to even zero
  EXPECT_EQ((Half::min_normal() / Half(1024.0f)).bits, 0x0001);
  EXPECT_EQ((Half(1.0f) / Half(0.0f)).bits, 0x7C00);
  EXPECT_TRUE(std::isnan(float(Half(0.0f) / Half(0.0f))));
  EXPECT_TRUE(std::isnan(float(Half::quiet_nan() + Half(1.0f))));
  EXPECT_EQ((-Half(0.0f)).bits, 0x8000);  // negation flips the sign bit, zero and NaN included
  EXPECT_EQ((-Half::quiet_nan()).bits, 0xFE00);
}

TEST(BFloat16Arithmetic, Basics) {
  EXPECT_EQ(float(BFloat16(1.0f) + BFloat16(2.0f)), 3.0f);
  EXPECT_EQ(float(BFloat16(3.0f) * BFloat16(0.5f)), 1.5f);
  EXPECT_EQ(float(BFloat16(1.0f) + BFloat16::epsilon()), 1.0f + 0x1p-7f);
  EXPECT_EQ(float(BFloat16(1.0f) + BFloat16(0x1p-8f)), 1.0f);  // a tie, to even
  EXPECT_EQ((BFloat16::max() * BFloat16(2.0f)).bits, 0x7F80);
  EXPECT_EQ((BFloat16::denorm_min() / BFloat16(2.0f)).bits, 0x0000);  // a tie, to even zero
  EXPECT_EQ((-BFloat16(0.0f)).bits, 0x8000);
}

// Why kernels accumulate in f32 (DESIGN.md section 1): a bf16 running sum of ones stops at 256,
// where 256 + 1 is a tie that rounds back to 256; an f32 accumulator rounded once is exact.
TEST(BFloat16Arithmetic, RunningSumOfOnesStallsAt256) {
  BFloat16 sum(0.0f);
  float acc = 0.0f;
  for (int i = 0; i < 100000; ++i) {
    sum += BFloat16(1.0f);
    acc += float(BFloat16(1.0f));
  }
  EXPECT_EQ(float(sum), 256.0f);
  EXPECT_EQ(float(BFloat16(acc)), 99840.0f);  // 100000 rounded once to bf16 (8 bits)
  EXPECT_EQ(acc, 100000.0f);
}

TEST(Float16Types, AreConstexpr) {
  static_assert((Half(1.0f) + Half(2.0f)).bits == 0x4200);
  static_assert(BFloat16(-2.0f).bits == 0xC000);
  static_assert(float(Half::from_bits(0x3555)) == 0x1.554p-2f);
  static_assert(fp16_bits::f32_to_f16(0x1p-25f) == 0 && fp16_bits::f32_to_f16(0x1p-24f) == 1);
  SUCCEED();
}

}  // namespace
