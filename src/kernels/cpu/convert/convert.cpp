// Bulk dtype conversion: the scalar reference for every pair of dtypes, and the dispatch to the
// SIMD fast paths between f32, f16 and bf16 (convert_avx2.cpp, convert_avx512.cpp,
// convert_avx512bf16.cpp). This unit is compiled without ISA flags.
#include "mixprec/kernels/convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "convert_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels {
namespace {

template <typename T>
inline constexpr bool is_float16_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type a value is read as for arithmetic: 16-bit floats widen (exactly) to f32.
template <typename T>
using arith_t = std::conditional_t<is_float16_v<T>, float, T>;

// Rounding to a 16-bit float from a wider source must happen once. Going through f32 with the
// ordinary RNE conversion rounds twice and can be wrong: x just above a 16-bit midpoint may
// round *down onto* the midpoint in f32, and the second rounding then ties to even, away from
// the nearest value (f64 1 + 2^-11 + 2^-52 -> f32 1 + 2^-11 -> f16 1.0; the nearest f16 is
// 1 + 2^-10).
//
// Round-to-odd fixes that: truncate to f32, then set the last bit if anything was cut off.
// With p = 24 bits for f32 and q <= 11 bits for the target (f16 11, bf16 8), p >= q + 2, so:
//  - every target value and every midpoint between two neighbours has at most q + 1 bits and
//    lies on the f32 grid, and its last f32 bit is 0 (it has spare low bits);
//  - round-to-odd is monotone and exact on representable values, and an inexact result has its
//    last bit 1, so it never lands on a midpoint or a target value it did not start on, nor
//    crosses one. The f32 value therefore lies on the same side of every midpoint as x, and
//    the RNE step to the target returns exactly what rounding x directly would.
// This holds at every magnitude: the f32 grid is at least 2^13 times finer than f16's
// (including f16 subnormals, which are f32 normals) and 2^16 times finer than bf16's (both
// share the exponent range, so bf16 subnormals sit on the f32 subnormal grid). The overflow
// thresholds (65520 for f16, 2^128 - 2^119 for bf16) are midpoints too, so overflow is exact.
//
// It is computed from the bits alone, with no floating-point arithmetic, so neither MXCSR's
// rounding mode nor FTZ/DAZ (which some libraries switch on process-wide) can change a result.
float f32_round_to_odd(double x) {
  const uint64_t u = std::bit_cast<uint64_t>(x);
  const uint32_t sign = static_cast<uint32_t>(u >> 32) & 0x80000000u;
  const int biased = static_cast<int>((u >> 52) & 0x7FF);
  const uint64_t mantissa = u & 0x000FFFFFFFFFFFFFull;
  if (biased == 0x7FF) {  // inf; or NaN: quiet, with the top 23 payload bits (as cvtsd2ss)
    const uint32_t nan = mantissa != 0 ? 0x00400000u | static_cast<uint32_t>(mantissa >> 29) : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | nan);
  }
  if (biased > 1023 + 127)  // beyond f32's range: truncation gives the max, whose last bit is 1
    return std::bit_cast<float>(sign | 0x7F7FFFFFu);
  // |x| = significand * 2^(e - 1075). An f32 normal keeps 24 significant bits (drop 29); below
  // 2^-126 the f32 grid is 2^-149, so drop 1075 - 149 - e = 926 - e bits.
  const int e = biased == 0 ? 1 : biased;
  const uint64_t significand = biased == 0 ? mantissa : mantissa | (uint64_t{1} << 52);
  const bool f32_normal = e >= 1023 - 126;
  const int drop = f32_normal ? 29 : 926 - e;
  uint64_t kept = 0;
  bool inexact = significand != 0;
  if (drop < 64) {
    kept = significand >> drop;
    inexact = (significand & ((uint64_t{1} << drop) - 1)) != 0;
  }
  const auto odd = static_cast<uint32_t>(kept | (inexact ? 1u : 0u));
  // A normal's leading bit (bit 23 of `odd`) carries into the exponent field: add, don't or.
  const uint32_t bits = f32_normal ? (static_cast<uint32_t>(e - 897) << 23) + odd : odd;
  return std::bit_cast<float>(sign | bits);
}

// The same for an integer: keep the top 24 significant bits of |v| and make the last one sticky.
template <typename Int>
float f32_round_to_odd(Int v) {
  bool negative = false;
  uint64_t magnitude = static_cast<uint64_t>(v);
  if constexpr (std::is_signed_v<Int>) {
    negative = v < 0;
    if (negative) magnitude = uint64_t{0} - magnitude;  // also right for the most negative value
  }
  int shift = 0;
  if (const int width = std::bit_width(magnitude); width > 24) {
    shift = width - 24;
    const bool inexact = (magnitude & ((uint64_t{1} << shift) - 1)) != 0;
    magnitude = (magnitude >> shift) | (inexact ? 1u : 0u);
  }
  const float f = std::ldexp(static_cast<float>(magnitude), shift);  // exact: <= 24 bits
  return negative ? -f : f;
}

// Float -> integer: truncate toward zero, saturate at the type's limits, NaN -> 0.
template <typename Int>
Int float_to_int(double x) {
  using limits = std::numeric_limits<Int>;
  if (std::isnan(x)) return 0;
  if (x <= static_cast<double>(limits::min())) return limits::min();
  // max + 1 is a power of two, exact in double (i64: 2^63 - 1 rounds up to 2^63, + 1 is lost).
  if (x >= static_cast<double>(limits::max()) + 1.0) return limits::max();
  return static_cast<Int>(x);
}

// One value, rounded once. The rules are the header's (convert.h); the 16-bit ones are
// float16.h's. Integer -> narrower integer wraps (two's complement), as static_cast, NumPy and
// PyTorch do.
template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<arith_t<From>>(v) != arith_t<From>{0};  // NaN != 0 is true
  } else if constexpr (is_float16_v<To>) {
    if constexpr (std::is_same_v<From, float> || is_float16_v<From>)
      return To(static_cast<float>(v));  // a 16-bit float widens to f32 exactly
    else
      return To(f32_round_to_odd(v));  // f64 and integers: see f32_round_to_odd
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<arith_t<From>>) {
    return float_to_int<To>(static_cast<double>(static_cast<arith_t<From>>(v)));
  } else {
    return static_cast<To>(static_cast<arith_t<From>>(v));
  }
}

template <typename From, typename To>
void convert_contiguous(const From* src, To* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = convert_one<To>(src[i]);
}

template <typename From, typename To>
void convert_strided_typed(const From* src, int64_t src_stride, To* dst, int64_t dst_stride,
                           std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<int64_t>(i);
    dst[k * dst_stride] = convert_one<To>(src[k * src_stride]);
  }
}

// Chunks below this many elements stay on one thread: a chunk then takes ~10-100 us, well above
// the cost of waking the OpenMP team.
constexpr int64_t kGrain = int64_t{1} << 16;

// Above this many bytes moved (read + written) the fast paths use non-temporal stores: the
// destination would not survive in the 32 MiB L3 anyway, and streaming saves the read of
// each destination line (write-allocate), a third of the traffic for f32 -> 16-bit.
constexpr std::size_t kStreamBytes = std::size_t{48} << 20;

const char* byte_ptr(const void* p) { return static_cast<const char*>(p); }
char* byte_ptr(void* p) { return static_cast<char*>(p); }

}  // namespace

// The scalar slot of every fast-path table, and the tail handler of the AVX2 kernels: plain
// functions, not inline, so the ISA units can call them without instantiating anything.
namespace convert_detail {

#define MIXPREC_CONVERT_SCALAR(pair, From, To)                                                   \
  void pair##_scalar(const void* src, void* dst, std::size_t n, bool /*stream*/) {               \
    convert_contiguous(static_cast<const From*>(src), static_cast<To*>(dst), n);                 \
  }                                                                                              \
  void pair##_strided_scalar(const void* src, int64_t src_stride, void* dst, int64_t dst_stride, \
                             std::size_t n) {                                                    \
    convert_strided_typed(static_cast<const From*>(src), src_stride, static_cast<To*>(dst),      \
                          dst_stride, n);                                                        \
  }

MIXPREC_CONVERT_SCALAR(f32_to_f16, float, Half)
MIXPREC_CONVERT_SCALAR(f16_to_f32, Half, float)
MIXPREC_CONVERT_SCALAR(f32_to_bf16, float, BFloat16)
MIXPREC_CONVERT_SCALAR(bf16_to_f32, BFloat16, float)
MIXPREC_CONVERT_SCALAR(f16_to_bf16, Half, BFloat16)
MIXPREC_CONVERT_SCALAR(bf16_to_f16, BFloat16, Half)
#undef MIXPREC_CONVERT_SCALAR

#define MIXPREC_CONVERT_U16_SCALAR(To)                                                      \
  void u16_to_##To##_scalar(const void* src, void* dst, std::size_t n, bool /*stream*/) {  \
    const auto* s = static_cast<const unsigned char*>(src); /* any alignment */            \
    auto* d = static_cast<To##_t*>(dst);                                                    \
    for (std::size_t i = 0; i < n; ++i) {                                                   \
      uint16_t v;                                                                           \
      std::memcpy(&v, s + 2 * i, 2);                                                        \
      d[i] = To##_t(static_cast<float>(v));                                                 \
    }                                                                                       \
  }
using f32_t = float;
using f16_t = Half;
using bf16_t = BFloat16;
MIXPREC_CONVERT_U16_SCALAR(f32)
MIXPREC_CONVERT_U16_SCALAR(f16)
MIXPREC_CONVERT_U16_SCALAR(bf16)
#undef MIXPREC_CONVERT_U16_SCALAR

}  // namespace convert_detail

namespace {

using convert_detail::ContiguousFn;
using convert_detail::StridedFn;

struct FastPath {
  DType from, to;
  IsaTable<ContiguousFn> contiguous;  // slots: scalar, avx2, avx512, avx512bf16
  IsaTable<StridedFn> strided;
};

#define MIXPREC_FAST_PATH(From, To, pair, bf16_contiguous, bf16_strided)              \
  FastPath {                                                                          \
    DType::From, DType::To,                                                           \
        {{convert_detail::pair##_scalar, convert_detail::pair##_avx2,                 \
          convert_detail::pair##_avx512, bf16_contiguous}},                           \
        {{convert_detail::pair##_strided_scalar, convert_detail::pair##_strided_avx2, \
          convert_detail::pair##_strided_avx512, bf16_strided}},                      \
  }

constexpr FastPath kFastPaths[] = {
    MIXPREC_FAST_PATH(F32, F16, f32_to_f16, nullptr, nullptr),
    MIXPREC_FAST_PATH(F16, F32, f16_to_f32, nullptr, nullptr),
    MIXPREC_FAST_PATH(F32, BF16, f32_to_bf16, convert_detail::f32_to_bf16_avx512bf16,
                      convert_detail::f32_to_bf16_strided_avx512bf16),
    MIXPREC_FAST_PATH(BF16, F32, bf16_to_f32, nullptr, nullptr),
    MIXPREC_FAST_PATH(F16, BF16, f16_to_bf16, convert_detail::f16_to_bf16_avx512bf16,
                      convert_detail::f16_to_bf16_strided_avx512bf16),
    MIXPREC_FAST_PATH(BF16, F16, bf16_to_f16, nullptr, nullptr),
};
#undef MIXPREC_FAST_PATH

const FastPath* find_fast_path(DType from, DType to) {
  for (const FastPath& path : kFastPaths)
    if (path.from == from && path.to == to) return &path;
  return nullptr;
}

// Every pair without a fast path: switch on both dtypes once, then a typed loop.
void convert_generic(const void* src, DType src_type, int64_t src_stride, void* dst, DType dst_type,
                     int64_t dst_stride, std::size_t n) {
  visit_dtype(src_type, [&](auto src_tag) {
    using From = typename decltype(src_tag)::type;
    visit_dtype(dst_type, [&](auto dst_tag) {
      using To = typename decltype(dst_tag)::type;
      const auto* s = static_cast<const From*>(src);
      auto* d = static_cast<To*>(dst);
      // A zero destination stride means every element lands on one address: stay serial.
      const int64_t grain = dst_stride == 0 ? static_cast<int64_t>(n) : kGrain;
      parallel_for(0, static_cast<int64_t>(n), grain, [&](int64_t lo, int64_t hi) {
        const auto count = static_cast<std::size_t>(hi - lo);
        if (src_stride == 1 && dst_stride == 1)
          convert_contiguous(s + lo, d + lo, count);
        else
          convert_strided_typed(s + lo * src_stride, src_stride, d + lo * dst_stride, dst_stride,
                                count);
      });
    });
  });
}

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n) {
  if (n == 0) return;
  if (src_type == dst_type) {
    if (src != dst) std::memmove(dst, src, n * dtype_size(src_type));
    return;
  }
  const FastPath* path = find_fast_path(src_type, dst_type);
  if (path == nullptr) {
    convert_generic(src, src_type, 1, dst, dst_type, 1, n);
    return;
  }
  ContiguousFn* kernel = path->contiguous();  // the active level, looked up per call
  const std::size_t src_size = dtype_size(src_type), dst_size = dtype_size(dst_type);
  const bool stream = n * (src_size + dst_size) >= kStreamBytes;
  parallel_for(0, static_cast<int64_t>(n), kGrain, [&](int64_t lo, int64_t hi) {
    const auto first = static_cast<std::size_t>(lo);
    kernel(byte_ptr(src) + first * src_size, byte_ptr(dst) + first * dst_size,
           static_cast<std::size_t>(hi - lo), stream);
  });
}

void convert_rows(const void* src, DType src_type, int64_t src_ld, void* dst, DType dst_type,
                  int64_t dst_ld, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const FastPath* path = src_type == dst_type ? nullptr : find_fast_path(src_type, dst_type);
  const std::size_t src_row = static_cast<std::size_t>(src_ld) * dtype_size(src_type);
  const std::size_t dst_row = static_cast<std::size_t>(dst_ld) * dtype_size(dst_type);
  const auto n = static_cast<std::size_t>(cols);
  if (path == nullptr) {  // a copy, or a pair without a fast path: per row (serial for one row)
    for (int64_t r = 0; r < rows; ++r)
      convert(byte_ptr(src) + r * src_row, src_type, byte_ptr(dst) + r * dst_row, dst_type, n);
    return;
  }
  ContiguousFn* kernel = path->contiguous();
  for (int64_t r = 0; r < rows; ++r)
    kernel(byte_ptr(src) + r * src_row, byte_ptr(dst) + r * dst_row, n, false);
}

void convert_strided(const void* src, DType src_type, int64_t src_stride, void* dst, DType dst_type,
                     int64_t dst_stride, std::size_t n) {
  if (n == 0) return;
  if (src_stride == 1 && dst_stride == 1) {
    convert(src, src_type, dst, dst_type, n);
    return;
  }
  const FastPath* path = find_fast_path(src_type, dst_type);
  if (path == nullptr || dst_stride == 0) {
    convert_generic(src, src_type, src_stride, dst, dst_type, dst_stride, n);
    return;
  }
  StridedFn* kernel = path->strided();
  const auto src_size = static_cast<int64_t>(dtype_size(src_type));
  const auto dst_size = static_cast<int64_t>(dtype_size(dst_type));
  parallel_for(0, static_cast<int64_t>(n), kGrain, [&](int64_t lo, int64_t hi) {
    kernel(byte_ptr(src) + lo * src_stride * src_size, src_stride,
           byte_ptr(dst) + lo * dst_stride * dst_size, dst_stride,
           static_cast<std::size_t>(hi - lo));
  });
}

void convert_u16(const uint16_t* src, void* dst, DType dst_type, std::size_t n) {
  using namespace convert_detail;
  static constexpr struct {
    DType to;
    IsaTable<ContiguousFn> kernel;  // slots: scalar, avx2, avx512, avx512bf16
  } kPaths[] = {
      {DType::F32, {{u16_to_f32_scalar, nullptr, u16_to_f32_avx512, nullptr}}},
      {DType::F16, {{u16_to_f16_scalar, nullptr, u16_to_f16_avx512, nullptr}}},
      {DType::BF16, {{u16_to_bf16_scalar, nullptr, u16_to_bf16_avx512, u16_to_bf16_avx512bf16}}},
  };
  if (n == 0) return;
  for (const auto& path : kPaths) {
    if (path.to != dst_type) continue;
    ContiguousFn* kernel = path.kernel();
    const std::size_t dst_size = dtype_size(dst_type);
    const bool stream = n * (2 + dst_size) >= kStreamBytes;
    parallel_for(0, static_cast<int64_t>(n), kGrain, [&](int64_t lo, int64_t hi) {
      const auto first = static_cast<std::size_t>(lo);
      kernel(byte_ptr(src) + first * 2, byte_ptr(dst) + first * dst_size, static_cast<std::size_t>(hi - lo),
             stream);
    });
    return;
  }
  MIXPREC_CHECK(false, "[convert_u16] expected f32, f16 or bf16 output, got ", dtype_name(dst_type));
}

}  // namespace mixprec::kernels
