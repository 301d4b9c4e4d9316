// Bulk conversion kernels (kernels/convert.h) on every kernel level this machine has: the SIMD
// fast paths (f32 <-> f16, f32 <-> bf16, f16 <-> bf16) must equal the scalar rules of
// core/float16.h bit for bit, for every input class, tail length, misalignment and stride; and
// the whole dtype cross-product must follow convert.h's rules, checked against an independent
// model built on tests/support/fp_reference.h.
#include <gtest/gtest.h>

#include "mixprec/kernels/convert.h"

// GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized on their own "undefined" operands
// (GCC bug 105593); the state that counts is the one in force where <immintrin.h> is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "support/fp_reference.h"
#include "support/isa_levels.h"

namespace {

using mixprec::DType;
using mixprec::dtype_name;
using mixprec::dtype_size;
using mixprec::IsaLevel;
using mixprec::kernels::convert;
using mixprec::kernels::convert_rows;
using mixprec::kernels::convert_strided;
using mixprec::test_support::Format16;
namespace fp16_bits = mixprec::fp16_bits;

using Bytes = std::vector<unsigned char>;

float f32(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// ---- the fast pairs, their scalar reference, and their inputs --------------------------------

struct Pair {
  DType from, to;
};
constexpr Pair kFastPairs[] = {{DType::F32, DType::F16},  {DType::F16, DType::F32},
                               {DType::F32, DType::BF16}, {DType::BF16, DType::F32},
                               {DType::F16, DType::BF16}, {DType::BF16, DType::F16}};

std::string pair_name(Pair p) {
  return std::string(dtype_name(p.from)) + "->" + std::string(dtype_name(p.to));
}

// An element of a 2- or 4-byte float type, as its bits.
uint32_t load_bits(const unsigned char* base, DType t, int64_t index) {
  if (dtype_size(t) == 4) {
    uint32_t u;
    std::memcpy(&u, base + index * 4, 4);
    return u;
  }
  uint16_t h;
  std::memcpy(&h, base + index * 2, 2);
  return h;
}

void store_bits(unsigned char* base, DType t, int64_t index, uint32_t bits) {
  if (dtype_size(t) == 4) {
    std::memcpy(base + index * 4, &bits, 4);
  } else {
    const auto h = static_cast<uint16_t>(bits);
    std::memcpy(base + index * 2, &h, 2);
  }
}

// The scalar rules (core/float16.h), the result every level must reproduce.
uint32_t scalar_reference(Pair p, uint32_t src) {
  const float x = p.from == DType::F32   ? f32(src)
                  : p.from == DType::F16 ? fp16_bits::f16_to_f32(static_cast<uint16_t>(src))
                                         : fp16_bits::bf16_to_f32(static_cast<uint16_t>(src));
  switch (p.to) {
    case DType::F32:
      return bits_of(x);
    case DType::F16:
      return fp16_bits::f32_to_f16(x);
    default:
      return fp16_bits::f32_to_bf16(x);
  }
}

// Every input class for an f32 source: each f16 and bf16 value and midpoint +-2 ulp (both
// signs), overflow boundaries, f32 subnormals (which vcvtneps2bf16 flushes), zeros, infinities,
// NaNs (quiet and signaling, several payloads), random bits. Shuffled, so that every vector
// mixes classes (a subnormal lane next to normal ones exercises the bf16 fix-up blend).
const std::vector<uint32_t>& f32_inputs() {
  static const std::vector<uint32_t> pool = [] {
    std::vector<uint32_t> v;
    for (const Format16* format : {&Format16::f16(), &Format16::bf16()})
      for (uint32_t k = 0; k <= format->max_finite_bits(); ++k)
        for (const double c : {format->magnitude(static_cast<uint16_t>(k)),
                               format->midpoint_above(static_cast<uint16_t>(k))})
          for (int d = -2; d <= 2; ++d) {
            const uint32_t u = bits_of(static_cast<float>(c)) + static_cast<uint32_t>(d);
            if (static_cast<int32_t>(u) < 0) continue;  // below +0
            v.push_back(u);
            v.push_back(u | 0x80000000u);
          }
    for (uint32_t u :
         {0x00000001u, 0x00008000u, 0x00018000u, 0x00400000u, 0x007FFFFFu, 0x7F800000u, 0x7F800001u,
          0x7FBFFFFFu, 0x7FC00000u, 0x7FC00001u, 0x7F812345u, 0x7FFFFFFFu, 0x477FF000u, 0x477FEFFFu,
          0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0x33000000u, 0x33000001u})
      for (uint32_t sign : {0u, 0x80000000u}) v.push_back(u | sign);
    std::mt19937 rng(42);
    for (int i = 0; i < 200000; ++i) v.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t payload = 1; payload < (1u << 23); payload = payload * 3 + 1)  // NaNs
      v.push_back(0x7F800000u | payload);
    std::shuffle(v.begin(), v.end(), rng);
    return v;
  }();
  return pool;
}

// For a 16-bit source: all 65,536 patterns, shuffled.
const std::vector<uint32_t>& u16_inputs() {
  static const std::vector<uint32_t> pool = [] {
    std::vector<uint32_t> v(65536);
    for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
    std::shuffle(v.begin(), v.end(), std::mt19937(7));
    return v;
  }();
  return pool;
}

const std::vector<uint32_t>& inputs_for(DType from) {
  return from == DType::F32 ? f32_inputs() : u16_inputs();
}

// Source bytes holding `count` inputs starting at pool position `first` (wrapping around).
Bytes make_source(DType from, std::size_t first, std::size_t count) {
  const std::vector<uint32_t>& pool = inputs_for(from);
  Bytes out(count * dtype_size(from));
  for (std::size_t i = 0; i < count; ++i)
    store_bits(out.data(), from, static_cast<int64_t>(i), pool[(first + i) % pool.size()]);
  return out;
}

// Reports the first few mismatching elements; returns how many there were.
std::size_t compare(Pair p, const unsigned char* src, int64_t src_stride, const unsigned char* dst,
                    int64_t dst_stride, std::size_t n, const std::string& where) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<int64_t>(i);
    const uint32_t in = load_bits(src, p.from, k * src_stride);
    const uint32_t got = load_bits(dst, p.to, k * dst_stride);
    const uint32_t want = scalar_reference(p, in);
    if (got != want && ++bad <= 5)
      ADD_FAILURE() << pair_name(p) << " " << where << " element " << i << ": input 0x" << std::hex
                    << in << " gave 0x" << got << ", scalar gives 0x" << want << std::dec;
  }
  return bad;
}

constexpr unsigned char kSentinel = 0xA5;

class ConvertFastPath : public mixprec::test_support::IsaTest {};

TEST_P(ConvertFastPath, EveryInputClassMatchesScalarBitForBit) {
  for (const Pair p : kFastPairs) {
    const std::size_t n = inputs_for(p.from).size();
    const Bytes src = make_source(p.from, 0, n);
    Bytes dst(n * dtype_size(p.to));
    convert(src.data(), p.from, dst.data(), p.to, n);
    EXPECT_EQ(compare(p, src.data(), 1, dst.data(), 1, n, "bulk"), 0u);
  }
}

// Lengths 0..257 (every tail of every vector width, several full vectors), with source and
// destination each offset by 0..3 elements from a 64-byte boundary; nothing outside the
// destination range may be written.
TEST_P(ConvertFastPath, TailsAndMisalignedPointers) {
  constexpr std::size_t kGuard = 64;
  for (const Pair p : kFastPairs) {
    const std::size_t ss = dtype_size(p.from), ds = dtype_size(p.to);
    for (std::size_t n = 0; n <= 257; ++n)
      for (std::size_t src_offset = 0; src_offset < 4; ++src_offset)
        for (std::size_t dst_offset = 0; dst_offset < 4; ++dst_offset) {
          const Bytes values = make_source(p.from, n * 31 + src_offset * 7 + dst_offset, n);
          alignas(64) static unsigned char src[kGuard + 264 * 4], dst[2 * kGuard + 264 * 4];
          if (n != 0) std::memcpy(src + kGuard + src_offset * ss, values.data(), values.size());
          std::memset(dst, kSentinel, sizeof dst);
          unsigned char* out = dst + kGuard + dst_offset * ds;
          convert(src + kGuard + src_offset * ss, p.from, out, p.to, n);
          const std::string where = "n=" + std::to_string(n) + " offsets " +
                                    std::to_string(src_offset) + "/" + std::to_string(dst_offset);
          ASSERT_EQ(compare(p, src + kGuard + src_offset * ss, 1, out, 1, n, where), 0u);
          for (unsigned char* b = dst; b < dst + sizeof dst; ++b) {
            if (b < out || b >= out + n * ds) {
              ASSERT_EQ(*b, kSentinel) << pair_name(p) << " " << where << " wrote byte "
                                       << (b - out) << " outside the destination";
            }
          }
        }
  }
}

// Element strides, negative and zero source strides included; the skipped destination
// elements keep their old contents.
TEST_P(ConvertFastPath, StridedMatchesScalar) {
  const int64_t kStrides[][2] = {{2, 1},  {1, 2}, {3, 3},  {-1, 1},
                                 {-2, 3}, {0, 1}, {1, -1}, {5, -2}};
  for (const Pair p : kFastPairs) {
    const auto ss = static_cast<int64_t>(dtype_size(p.from));
    const auto ds = static_cast<int64_t>(dtype_size(p.to));
    for (std::size_t n = 0; n <= 257; ++n)
      for (const auto& strides : kStrides) {
        const int64_t src_stride = strides[0], dst_stride = strides[1];
        const int64_t src_span =
            std::max<int64_t>(1, std::abs(src_stride) * static_cast<int64_t>(n));
        const int64_t dst_span =
            std::max<int64_t>(1, std::abs(dst_stride) * static_cast<int64_t>(n));
        Bytes src = make_source(p.from, n * 13 + static_cast<std::size_t>(src_stride + 5),
                                static_cast<std::size_t>(src_span));
        Bytes dst(static_cast<std::size_t>(dst_span * ds), kSentinel);
        // A negative stride starts at the last element and walks down.
        const int64_t src_first = src_stride < 0 ? src_span - 1 : 0;
        const int64_t dst_first = dst_stride < 0 ? dst_span - 1 : 0;
        const unsigned char* s = src.data() + src_first * ss;
        unsigned char* d = dst.data() + dst_first * ds;
        convert_strided(s, p.from, src_stride, d, p.to, dst_stride, n);
        const std::string where = "n=" + std::to_string(n) + " strides " +
                                  std::to_string(src_stride) + "/" + std::to_string(dst_stride);
        ASSERT_EQ(compare(p, s, src_stride, d, dst_stride, n, where), 0u);
        std::vector<bool> written(static_cast<std::size_t>(dst_span), false);
        for (std::size_t i = 0; i < n; ++i)
          written[static_cast<std::size_t>(dst_first + static_cast<int64_t>(i) * dst_stride)] =
              true;
        for (int64_t e = 0; e < dst_span; ++e) {
          if (written[static_cast<std::size_t>(e)]) continue;
          for (int64_t b = 0; b < ds; ++b) {
            ASSERT_EQ(dst[static_cast<std::size_t>(e * ds + b)], kSentinel)
                << pair_name(p) << " " << where << " overwrote skipped element " << e;
          }
        }
      }
  }
}

// A matrix with padded rows (what attention's per-head blocks are): every row converted as
// convert() would, the padding between rows never written.
TEST_P(ConvertFastPath, RowsMatchScalarAndLeaveThePaddingAlone) {
  for (const Pair p : kFastPairs) {
    const auto ss = static_cast<int64_t>(dtype_size(p.from));
    const auto ds = static_cast<int64_t>(dtype_size(p.to));
    for (const int64_t cols : {1, 15, 16, 17, 64, 100})
      for (const int64_t rows : {0, 1, 3, 7}) {
        const int64_t src_ld = cols + 5, dst_ld = cols + 3;
        Bytes src = make_source(p.from, static_cast<std::size_t>(cols * 7 + rows),
                                static_cast<std::size_t>(std::max<int64_t>(1, rows * src_ld)));
        Bytes dst(static_cast<std::size_t>(std::max<int64_t>(1, rows * dst_ld) * ds), kSentinel);
        convert_rows(src.data(), p.from, src_ld, dst.data(), p.to, dst_ld, rows, cols);
        for (int64_t r = 0; r < rows; ++r) {
          const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " row " +
                                    std::to_string(r);
          ASSERT_EQ(compare(p, src.data() + r * src_ld * ss, 1, dst.data() + r * dst_ld * ds, 1,
                            static_cast<std::size_t>(cols), where),
                    0u);
          for (int64_t b = cols * ds; b < dst_ld * ds; ++b)
            ASSERT_EQ(dst[static_cast<std::size_t>(r * dst_ld * ds + b)], kSentinel)
                << pair_name(p) << " " << where << " wrote into the row's padding";
        }
      }
  }
}

// Pairs without a fast path and the same dtype (a copy) take convert() per row.
TEST(ConvertRows, CopiesAndGenericPairs) {
  const float values[6] = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  float copied[2][4] = {{9, 9, 9, 9}, {9, 9, 9, 9}};
  convert_rows(values, DType::F32, 3, copied, DType::F32, 4, 2, 3);
  double widened[2][3] = {};
  convert_rows(values, DType::F32, 3, widened, DType::F64, 3, 2, 3);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(copied[r][j], values[r * 3 + j]);
      EXPECT_EQ(widened[r][j], static_cast<double>(values[r * 3 + j]));
    }
    EXPECT_EQ(copied[r][3], 9.0f) << "row " << r << "'s padding was written";
  }
}

// Arrays past the streaming threshold (48 MiB moved) and split across threads, with a
// destination one element off a cache line. The source repeats the input pool, so the result
// is checked against one period of reference results with memcmp.
TEST_P(ConvertFastPath, LargeArraysOnOneAndTwoThreads) {
  const int threads_before = mixprec::num_threads();
  for (const Pair p : kFastPairs) {
    const std::size_t ss = dtype_size(p.from), ds = dtype_size(p.to);
    const std::size_t n = (std::size_t{50} << 20) / (ss + ds);
    const std::size_t period = inputs_for(p.from).size();
    const Bytes one_period = make_source(p.from, 0, period);
    Bytes want(period * ds);
    for (std::size_t i = 0; i < period; ++i)
      store_bits(
          want.data(), p.to, static_cast<int64_t>(i),
          scalar_reference(p, load_bits(one_period.data(), p.from, static_cast<int64_t>(i))));
    Bytes src(n * ss);
    for (std::size_t at = 0; at < n; at += period)
      std::memcpy(src.data() + at * ss, one_period.data(), std::min(period, n - at) * ss);
    for (const int threads : {1, 2}) {
      mixprec::set_num_threads(threads);
      Bytes dst(n * ds + 64, kSentinel);
      unsigned char* out = dst.data() + ds;
      convert(src.data(), p.from, out, p.to, n);
      for (std::size_t at = 0; at < n; at += period) {
        const std::size_t count = std::min(period, n - at);
        if (std::memcmp(out + at * ds, want.data(), count * ds) != 0) {
          compare(p, src.data() + at * ss, 1, out + at * ds, 1, count,
                  "large, " + std::to_string(threads) + " threads");
          FAIL() << pair_name(p) << ": mismatch in elements [" << at << ", " << at + count << ")";
        }
      }
      EXPECT_EQ(dst[0], kSentinel);
      EXPECT_EQ(dst[n * ds + ds], kSentinel);
    }
  }
  mixprec::set_num_threads(threads_before);
}

// f16 <-> bf16 in place (same pointer, same element size), contiguous, parallel and strided.
TEST_P(ConvertFastPath, InPlaceBetweenHalfTypes) {
  for (const Pair p : {Pair{DType::F16, DType::BF16}, Pair{DType::BF16, DType::F16}})
    for (const std::size_t n : {std::size_t{1000}, std::size_t{300001}}) {
      const Bytes original = make_source(p.from, n, n);
      Bytes buffer = original;
      convert(buffer.data(), p.from, buffer.data(), p.to, n);
      EXPECT_EQ(compare(p, original.data(), 1, buffer.data(), 1, n, "in place"), 0u);
      buffer = original;
      convert_strided(buffer.data(), p.from, 3, buffer.data(), p.to, 3, n / 3);
      EXPECT_EQ(compare(p, original.data(), 3, buffer.data(), 3, n / 3, "in place strided"), 0u);
    }
}

// Some libraries switch on flush-to-zero and denormals-are-zero for the whole process, or change
// the rounding mode; conversions to 16 bits and back must not notice. Expected results are
// computed first, under the default MXCSR; only the conversions run under the altered one.
class MxcsrScope {
 public:
  explicit MxcsrScope(unsigned set_bits) : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | set_bits); }
  ~MxcsrScope() { _mm_setcsr(saved_); }
  MxcsrScope(const MxcsrScope&) = delete;
  MxcsrScope& operator=(const MxcsrScope&) = delete;

 private:
  unsigned saved_;
};
constexpr unsigned kFtzDazRoundTowardZero = 0x8000u | 0x0040u | 0x6000u;

TEST_P(ConvertFastPath, IndependentOfFlushToZeroAndRoundingMode) {
  for (const Pair p : kFastPairs) {
    const std::size_t n = inputs_for(p.from).size();
    const Bytes src = make_source(p.from, 0, n);
    Bytes want(n * dtype_size(p.to)), got(n * dtype_size(p.to));
    convert(src.data(), p.from, want.data(), p.to, n);
    ASSERT_EQ(compare(p, src.data(), 1, want.data(), 1, n, "default MXCSR"), 0u);
    {
      MxcsrScope mxcsr(kFtzDazRoundTowardZero);
      convert(src.data(), p.from, got.data(), p.to, n);
    }
    EXPECT_TRUE(got == want) << pair_name(p) << " changes with FTZ/DAZ/round-toward-zero";
  }
  // f64 -> 16 bits: every midpoint of both formats (subnormal ones included) and its neighbours.
  for (const DType to : {DType::F16, DType::BF16}) {
    const Format16& format = to == DType::F16 ? Format16::f16() : Format16::bf16();
    std::vector<double> in;
    std::vector<uint16_t> want, got;
    for (uint32_t k = 0; k <= format.max_finite_bits(); ++k) {
      const double m = format.midpoint_above(static_cast<uint16_t>(k));
      for (const double x : {std::nextafter(m, 0.0), m, std::nextafter(m, 1e300)}) {
        in.push_back(x);
        in.push_back(-x);
      }
    }
    for (const double x : in) want.push_back(format.from_f64(x));
    got.resize(in.size());
    {
      MxcsrScope mxcsr(kFtzDazRoundTowardZero);
      convert(in.data(), DType::F64, got.data(), to, in.size());
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (got[i] != want[i] && ++bad <= 5)
        ADD_FAILURE() << "f64 " << in[i] << " -> " << dtype_name(to) << " gave 0x" << std::hex
                      << got[i] << ", expected 0x" << want[i] << std::dec;
    EXPECT_EQ(bad, 0u);
  }
}

// Every one of the 2^32 f32 patterns to f16 and bf16, against the scalar rules. Opt-in (about
// 10 s per level): MIXPREC_TEST_EXHAUSTIVE=1.
TEST_P(ConvertFastPath, ExhaustiveF32) {
  const char* env = std::getenv("MIXPREC_TEST_EXHAUSTIVE");
  if (env == nullptr || std::string(env) != "1")
    GTEST_SKIP() << "set MIXPREC_TEST_EXHAUSTIVE=1 to convert all 2^32 f32 patterns";
  constexpr std::size_t kChunk = std::size_t{1} << 24;
  std::vector<uint32_t> src(kChunk);
  std::vector<uint16_t> to_f16(kChunk), to_bf16(kChunk);
  std::size_t bad = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
    for (std::size_t i = 0; i < kChunk; ++i) src[i] = static_cast<uint32_t>(base + i);
    convert(src.data(), DType::F32, to_f16.data(), DType::F16, kChunk);
    convert(src.data(), DType::F32, to_bf16.data(), DType::BF16, kChunk);
    for (std::size_t i = 0; i < kChunk; ++i) {
      const float x = f32(src[i]);
      if ((to_f16[i] != fp16_bits::f32_to_f16(x) || to_bf16[i] != fp16_bits::f32_to_bf16(x)) &&
          ++bad <= 5)
        ADD_FAILURE() << "input 0x" << std::hex << src[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvertFastPath);

// ---- the instructions themselves -------------------------------------------------------------
// What the hardware does, checked directly, so that a CPU that differs from the documented rules
// is noticed here rather than as a kernel mismatch. The raw loops are compiled for their ISA
// with target attributes; they only move bits, nothing else (no library or gtest code may be
// instantiated inside them: see the ODR note in src/kernels/cpu/convert/convert_kernels.h).

__attribute__((target("avx2,f16c"))) void raw_vcvtps2ph_ymm(const uint32_t* in, uint16_t* out,
                                                            std::size_t n) {  // n % 8 == 0
  for (std::size_t i = 0; i < n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(reinterpret_cast<const float*>(in + i)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

__attribute__((target("avx2,f16c"))) void raw_vcvtph2ps_ymm(const uint16_t* in, uint32_t* out,
                                                            std::size_t n) {  // n % 8 == 0
  for (std::size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(reinterpret_cast<float*>(out + i),
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
}

__attribute__((target("avx512f"))) void raw_vcvtps2ph_zmm(const uint32_t* in, uint16_t* out,
                                                          std::size_t n) {  // n % 16 == 0
  for (std::size_t i = 0; i < n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(out + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

__attribute__((target("avx512f"))) void raw_vcvtph2ps_zmm(const uint16_t* in, uint32_t* out,
                                                          std::size_t n) {  // n % 16 == 0
  for (std::size_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(out + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
}

__attribute__((target("avx512f,avx512bf16"))) void raw_vcvtneps2bf16_zmm(const uint32_t* in,
                                                                         uint16_t* out,
                                                                         std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {  // n % 16 == 0
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(in + i))));
  }
}

// The f32 input pool, padded to a multiple of 16 with copies of its start.
std::vector<uint32_t> padded_f32_inputs() {
  std::vector<uint32_t> v = f32_inputs();
  for (std::size_t i = 0; v.size() % 16 != 0; ++i) v.push_back(v[i]);
  return v;
}

bool is_f32_subnormal(uint32_t u) { return (u & 0x7F800000u) == 0 && (u & 0x007FFFFFu) != 0; }

// vcvtps2ph on the input pool and vcvtph2ps on all 65,536 patterns, against the scalar rules.
void check_half_instructions(void (*narrow)(const uint32_t*, uint16_t*, std::size_t),
                             void (*widen)(const uint16_t*, uint32_t*, std::size_t)) {
  const std::vector<uint32_t> in = padded_f32_inputs();
  std::vector<uint16_t> narrowed(in.size());
  narrow(in.data(), narrowed.data(), in.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (narrowed[i] != fp16_bits::f32_to_f16(f32(in[i])) && ++bad <= 5)
      ADD_FAILURE() << "vcvtps2ph 0x" << std::hex << in[i] << " -> 0x" << narrowed[i];
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint32_t> widened(all.size());
  widen(all.data(), widened.data(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    if (widened[i] != bits_of(fp16_bits::f16_to_f32(all[i])) && ++bad <= 5)
      ADD_FAILURE() << "vcvtph2ps 0x" << std::hex << all[i] << " -> 0x" << widened[i];
  EXPECT_EQ(bad, 0u);
}

TEST(HardwareConversionInstructions, F16cMatchesScalarRulesExactly) {
  if (!mixprec::isa_supported(IsaLevel::Avx2)) GTEST_SKIP() << "kernel level avx2 not supported";
  check_half_instructions(raw_vcvtps2ph_ymm, raw_vcvtph2ps_ymm);
}

TEST(HardwareConversionInstructions, Avx512HalfConversionsMatchScalarRulesExactly) {
  if (!mixprec::isa_supported(IsaLevel::Avx512))
    GTEST_SKIP() << "kernel level avx512 not supported";
  check_half_instructions(raw_vcvtps2ph_zmm, raw_vcvtph2ps_zmm);
}

// vcvtneps2bf16 rounds and quiets NaNs like the scalar rule, but the SDM says it treats
// subnormal inputs as zero; the avx512bf16 kernel patches those lanes. This pins down both
// halves, and prints what this CPU does with subnormals.
TEST(HardwareConversionInstructions, Vcvtneps2bf16MatchesScalarExceptSubnormalInputs) {
  if (!mixprec::isa_supported(IsaLevel::Avx512Bf16))
    GTEST_SKIP() << "kernel level avx512bf16 not supported";
  const std::vector<uint32_t> in = padded_f32_inputs();
  std::vector<uint16_t> out(in.size());
  raw_vcvtneps2bf16_zmm(in.data(), out.data(), in.size());
  std::size_t bad = 0, subnormals = 0, flushed = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const uint16_t want = fp16_bits::f32_to_bf16(f32(in[i]));
    if (is_f32_subnormal(in[i])) {
      ++subnormals;
      const auto signed_zero = static_cast<uint16_t>((in[i] >> 16) & 0x8000u);
      if (out[i] == signed_zero && want != signed_zero)
        ++flushed;
      else if (out[i] != want && ++bad <= 5)
        ADD_FAILURE() << "subnormal 0x" << std::hex << in[i] << " -> 0x" << out[i];
    } else if (out[i] != want && ++bad <= 5) {
      ADD_FAILURE() << "vcvtneps2bf16 0x" << std::hex << in[i] << " -> 0x" << out[i]
                    << ", scalar 0x" << want;
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(subnormals, 1000u);
  std::cout << "[ observed ] vcvtneps2bf16 flushed " << flushed << " of " << subnormals
            << " subnormal inputs (that would not round to zero anyway) to signed zero\n";
  RecordProperty("vcvtneps2bf16_subnormals_flushed", std::to_string(flushed));
}

// ---- the generic path: every dtype pair against an independent model of convert.h ------------

constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                DType::I64, DType::I32, DType::U8,  DType::Bool};

// A source value decoded exactly (long double holds f64 and every i64).
struct Exact {
  bool nan = false;
  bool negative = false;  // for NaN: the sign bit
  long double value = 0;
};

Exact decode(DType t, const unsigned char* p) {
  Exact x;
  auto from_float = [&](long double v) {
    x.nan = std::isnan(v);
    x.negative = std::signbit(v);
    x.value = x.nan ? 0 : v;
  };
  switch (t) {
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      from_float(v);
      break;
    }
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      from_float(v);
      break;
    }
    case DType::F16:
    case DType::BF16: {
      const Format16& f = t == DType::F16 ? Format16::f16() : Format16::bf16();
      uint16_t b;
      std::memcpy(&b, p, 2);
      x.nan = f.is_nan(b);
      x.negative = (b & 0x8000u) != 0;
      x.value = x.nan ? 0 : f.value(b);
      break;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      x.value = v;
      break;
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      x.value = v;
      break;
    }
    case DType::U8:
      x.value = *p;
      break;
    case DType::Bool:
      x.value = *p != 0;
      break;
  }
  return x;
}

template <typename Int>
Int expected_int(const Exact& x, bool from_floating) {
  using limits = std::numeric_limits<Int>;
  if (!from_floating)  // integer -> integer wraps, two's complement
    return static_cast<Int>(static_cast<uint64_t>(static_cast<int64_t>(x.value)));
  if (x.nan) return 0;
  const long double t = std::trunc(x.value);
  if (t <= static_cast<long double>(limits::min())) return limits::min();
  if (t >= static_cast<long double>(limits::max())) return limits::max();
  return static_cast<Int>(t);
}

// Checks one converted element. Float results of a NaN must be quiet NaNs of the same sign
// (their payloads are pinned down by the fast-path tests and test_float16).
// The same dtype is a copy, not a conversion: every bit is kept (a signaling NaN included).
bool matches_model(DType from, DType to, const Exact& x, const unsigned char* got,
                   const unsigned char* src) {
  if (from == to) return std::memcmp(got, src, dtype_size(from)) == 0;
  const bool from_floating = mixprec::is_floating(from);
  auto same = [&](const auto& want) { return std::memcmp(got, &want, sizeof want) == 0; };
  switch (to) {
    case DType::F64: {
      double g;
      std::memcpy(&g, got, 8);
      if (x.nan)
        return std::isnan(g) && std::signbit(g) == x.negative &&
               (std::bit_cast<uint64_t>(g) & (uint64_t{1} << 51));
      return same(static_cast<double>(x.value));
    }
    case DType::F32: {
      float g;
      std::memcpy(&g, got, 4);
      if (x.nan)
        return std::isnan(g) && std::signbit(g) == x.negative && (bits_of(g) & 0x00400000u);
      return same(static_cast<float>(x.value));
    }
    case DType::F16:
    case DType::BF16: {
      const Format16& f = to == DType::F16 ? Format16::f16() : Format16::bf16();
      uint16_t g;
      std::memcpy(&g, got, 2);
      if (x.nan) return f.is_nan(g) && ((g & 0x8000u) != 0) == x.negative && (g & f.quiet_bit());
      return g == f.round(x.value);
    }
    case DType::I64:
      return same(expected_int<int64_t>(x, from_floating));
    case DType::I32:
      return same(expected_int<int32_t>(x, from_floating));
    case DType::U8:
      return same(expected_int<uint8_t>(x, from_floating));
    case DType::Bool:
      return *got == ((x.nan || x.value != 0) ? 1 : 0);
  }
  return false;
}

template <typename T>
Bytes as_bytes(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Values of each source dtype, chosen at every rule's edges.
Bytes generic_inputs(DType t) {
  const double inf = INFINITY, nan = NAN;
  switch (t) {
    case DType::F64:
      return as_bytes(std::vector<double>{0.0,
                                          -0.0,
                                          1.0,
                                          -1.5,
                                          2.5,
                                          -2.5,
                                          0.49999,
                                          -0.9,
                                          255.9,
                                          256.0,
                                          -1.0,
                                          -129.7,
                                          127.5,
                                          2147483647.9,
                                          2147483648.0,
                                          -2147483648.9,
                                          -2147483649.0,
                                          1e10,
                                          -1e10,
                                          0x1p63,
                                          -0x1p63,
                                          0x1p63 - 1024,
                                          1e19,
                                          -1e19,
                                          1e300,
                                          -1e300,
                                          inf,
                                          -inf,
                                          nan,
                                          -nan,
                                          std::bit_cast<double>(0x7FF0000000000001ull),
                                          65519.99,
                                          65520.0,
                                          1.0 + 0x1p-11 + 0x1p-52,
                                          0x1p-25 + 0x1p-60,
                                          std::numeric_limits<double>::denorm_min(),
                                          1e-45,
                                          3.5e38,
                                          0x1p128 - 0x1p119 - 0x1p80,
                                          0x1p-134 + 0x1p-160,
                                          1.0 / 3});
    case DType::F32:
      return as_bytes(std::vector<float>{0.0f,
                                         -0.0f,
                                         1.0f,
                                         -1.5f,
                                         2.5f,
                                         -0.9f,
                                         255.9f,
                                         256.0f,
                                         -1.0f,
                                         127.5f,
                                         2147483520.0f,
                                         2147483648.0f,
                                         -2147483648.0f,
                                         -2147483904.0f,
                                         1e10f,
                                         0x1p63f,
                                         -0x1p63f,
                                         0x1p62f,
                                         3e38f,
                                         -3e38f,
                                         INFINITY,
                                         -INFINITY,
                                         NAN,
                                         -NAN,
                                         f32(0x7F800001),
                                         f32(0x00000001),
                                         f32(0x00018000),
                                         f32(0x007FFFFF),
                                         65519.99f,
                                         65520.0f,
                                         1.0f + 0x1p-11f,
                                         1.0f / 3});
    case DType::F16:
    case DType::BF16: {
      std::vector<uint16_t> all(65536);
      for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
      return as_bytes(all);
    }
    case DType::I64:
      return as_bytes(std::vector<int64_t>{0,
                                           1,
                                           -1,
                                           127,
                                           128,
                                           255,
                                           256,
                                           -129,
                                           65519,
                                           65520,
                                           -65520,
                                           2147483647,
                                           2147483648LL,
                                           -2147483649LL,
                                           (1LL << 24) + (1LL << 16) + 1,
                                           (1LL << 40) + (1LL << 32) + 1,
                                           (1LL << 53) + 1,
                                           (1LL << 62) + (1LL << 38) + 1,
                                           -((1LL << 62) + (1LL << 38) + 1),
                                           std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min()});
    case DType::I32:
      return as_bytes(std::vector<int32_t>{0, 1, -1, 127, 128, 255, 256, -129, 2049, 2051, 65519,
                                           65520, -65520, (1 << 24) + 1, (1 << 24) + (1 << 16) + 1,
                                           std::numeric_limits<int32_t>::max(),
                                           std::numeric_limits<int32_t>::min()});
    case DType::U8: {
      std::vector<uint8_t> all(256);
      for (int i = 0; i < 256; ++i) all[static_cast<std::size_t>(i)] = static_cast<uint8_t>(i);
      return as_bytes(all);
    }
    case DType::Bool:
      return Bytes{0, 1};
  }
  return {};
}

// Little-endian bytes as one hex number.
std::string hex_bytes(const unsigned char* p, std::size_t size) {
  std::string out;
  char digits[4];
  for (std::size_t k = size; k-- > 0;) {
    std::snprintf(digits, sizeof digits, "%02x", p[k]);
    out += digits;
  }
  return out;
}

class ConvertAllDTypes : public mixprec::test_support::IsaTest {};

// Contiguous, and strided with a reversed source and a gapped destination, for all 64 pairs.
TEST_P(ConvertAllDTypes, EveryPairFollowsTheRules) {
  for (const DType from : kAllDTypes)
    for (const DType to : kAllDTypes) {
      const Bytes src = generic_inputs(from);
      const std::size_t fs = dtype_size(from), ts = dtype_size(to), n = src.size() / fs;
      Bytes contiguous(n * ts), strided(2 * n * ts);
      convert(src.data(), from, contiguous.data(), to, n);
      convert_strided(src.data() + (n - 1) * fs, from, -1, strided.data(), to, 2, n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const Exact x = decode(from, src.data() + i * fs);
        const unsigned char* a = contiguous.data() + i * ts;
        const unsigned char* b = strided.data() + 2 * (n - 1 - i) * ts;
        const unsigned char* in = src.data() + i * fs;
        if ((!matches_model(from, to, x, a, in) || !matches_model(from, to, x, b, in)) &&
            ++bad <= 5) {
          ADD_FAILURE() << dtype_name(from) << "->" << dtype_name(to) << ": input 0x"
                        << hex_bytes(in, fs) << " gave 0x" << hex_bytes(a, ts);
        }
      }
    }
}

TEST_P(ConvertAllDTypes, SameDTypeCopiesBitsIncludingNaNPayloads) {
  const std::vector<uint32_t> values{0x7F800001u, 0xFFC12345u, 0x80000000u, 0x3F800000u};
  std::vector<uint32_t> out(values.size());
  convert(values.data(), DType::F32, out.data(), DType::F32, values.size());
  EXPECT_EQ(out, values);
  std::vector<uint32_t> reversed(values.size());
  convert_strided(values.data() + 3, DType::F32, -1, reversed.data(), DType::F32, 1, 4);
  EXPECT_EQ(reversed, (std::vector<uint32_t>{values[3], values[2], values[1], values[0]}));
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvertAllDTypes);

// ---- unsigned 16-bit detector samples (convert_u16) ------------------------------------------

// Every one of the 65,536 values, into f32 / f16 / bf16, at every kernel level, at an odd
// (unaligned) source address and with ragged tails: bit for bit what converting the exact f32
// value gives (fp16_bits' rules), which is what a u16 -> f32 -> 16-bit path would store.
class ConvertU16 : public mixprec::test_support::IsaTest {};

TEST_P(ConvertU16, EveryValueRoundsLikeItsF32) {
  Bytes raw(2 * 65536 + 1);
  for (uint32_t v = 0; v < 65536; ++v) {
    const auto h = static_cast<uint16_t>(v);
    std::memcpy(raw.data() + 1 + 2 * v, &h, 2);  // one byte in: unaligned on purpose
  }
  const auto* src = reinterpret_cast<const uint16_t*>(raw.data() + 1);
  for (const DType to : {DType::F32, DType::F16, DType::BF16}) {
    for (const std::size_t n : {std::size_t{65536}, std::size_t{65536 - 17}, std::size_t{5}}) {
      Bytes out(n * dtype_size(to) + 8, 0xAB);
      mixprec::kernels::convert_u16(src, out.data(), to, n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float x = static_cast<float>(i);
        const uint32_t want = to == DType::F32    ? bits_of(x)
                              : to == DType::F16 ? fp16_bits::f32_to_f16(x)
                                                 : fp16_bits::f32_to_bf16(x);
        if (load_bits(out.data(), to, static_cast<int64_t>(i)) != want && ++bad <= 5)
          ADD_FAILURE() << dtype_name(to) << ": " << i << " -> 0x" << std::hex
                        << load_bits(out.data(), to, static_cast<int64_t>(i)) << ", want 0x" << want;
      }
      EXPECT_EQ(bad, 0u) << dtype_name(to) << " n " << n;
      for (std::size_t b = n * dtype_size(to); b < out.size(); ++b)
        ASSERT_EQ(out[b], 0xAB) << "wrote past the end, " << dtype_name(to) << " n " << n;
    }
  }
  // Named hard cases: 257 is a bf16 tie (256 + 1, even neighbour 256), 259 rounds up to 260,
  // 65535 rounds to 65536 in bf16 and overflows f16 (65520 and above are +inf).
  uint16_t hard[] = {257, 259, 65535, 65519, 65520};
  uint16_t bf[5], hf[5];
  mixprec::kernels::convert_u16(hard, bf, DType::BF16, 5);
  mixprec::kernels::convert_u16(hard, hf, DType::F16, 5);
  EXPECT_EQ(fp16_bits::bf16_to_f32(bf[0]), 256.0F);
  EXPECT_EQ(fp16_bits::bf16_to_f32(bf[1]), 260.0F);
  EXPECT_EQ(fp16_bits::bf16_to_f32(bf[2]), 65536.0F);
  EXPECT_EQ(fp16_bits::f16_to_f32(hf[3]), 65504.0F);
  EXPECT_TRUE(std::isinf(fp16_bits::f16_to_f32(hf[4])));
  EXPECT_THROW(mixprec::kernels::convert_u16(hard, bf, DType::I32, 1), mixprec::Error);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvertU16);

}  // namespace
