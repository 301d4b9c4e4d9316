#pragma once
// The SIMD interface every CPU kernel template is written against, at width 1: the scalar
// level. simd_avx2.h and simd_avx512.h provide the same names at widths 8 and 16.
// clang-format off: the table below is aligned by hand
//
//   F                 a vector of kWidth f32 lanes
//   zero, set1, load, store  (kWidth contiguous f32); prefetch(p) a hint (no-op in scalar)
//   load_n(p, t, n)   n <= kWidth elements of dtype t (f32/f16/bf16), widened exactly; lanes
//                     past n are zero
//   store_n(p, t, v, n) n lanes rounded to dtype t (round to nearest even, as core/float16.h)
//   round_to(t, v)    v rounded to dtype t and widened back: store_n then load_n, in registers
//   add sub mul div max min fmadd(a, b, c) = a * b + c
//   select_negative(x, a, b) = x < 0 ? a : b, per lane
//   round_int(x)      round to nearest integer (as f32); trunc_int(x) toward zero
//   scale2(x, n)      x * 2^n for integral n
//   abs sqrt          (sqrt correctly rounded on every level)
//   select_less(a, b, t, f) = a < b ? t : f, per lane (false when either is NaN)
//   select_nan(x, t, f) = x is NaN ? t : f, per lane
//   fill_tail(v, n, c) lanes n and above replaced by c (a tail vector's neutral element)
//   reduce_add(v)     sum of the lanes (order depends on the width); reduce_max(v) their max,
//                     NaN if any lane is NaN
//   get_exponent(x)   floor(log2 |x|) and get_mantissa(x) = |x| / 2^floor(log2 |x|) in [1, 2),
//                     exact for finite nonzero x (subnormals included); other lanes unspecified
// clang-format on
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::simd {

struct Scalar {
  using F = float;
  static constexpr int kWidth = 1;

  static F zero() { return 0.0f; }
  static F set1(float x) { return x; }
  static F load(const float* p) { return *p; }
  static void prefetch(const void*) {}
  static void store(float* p, F v) { *p = v; }
  static F load_n(const void* p, DType t, int n) {
    if (n <= 0) return 0.0f;
    switch (t) {
      case DType::F32:
        return *static_cast<const float*>(p);
      case DType::F16:
        return fp16_bits::f16_to_f32(*static_cast<const uint16_t*>(p));
      case DType::BF16:
        return fp16_bits::bf16_to_f32(*static_cast<const uint16_t*>(p));
      default:
        return 0.0f;
    }
  }
  // v rounded to dtype t and widened back: what store_n then load_n would give, in registers.
  static F round_to(DType t, F v) {
    switch (t) {
      case DType::F16:
        return fp16_bits::f16_to_f32(fp16_bits::f32_to_f16(v));
      case DType::BF16:
        return fp16_bits::bf16_to_f32(fp16_bits::f32_to_bf16(v));
      default:
        return v;
    }
  }
  static void store_n(void* p, DType t, F v, int n) {
    if (n <= 0) return;
    switch (t) {
      case DType::F32:
        *static_cast<float*>(p) = v;
        break;
      case DType::F16:
        *static_cast<uint16_t*>(p) = fp16_bits::f32_to_f16(v);
        break;
      case DType::BF16:
        *static_cast<uint16_t*>(p) = fp16_bits::f32_to_bf16(v);
        break;
      default:
        break;
    }
  }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F max(F a, F b) { return a > b ? a : b; }
  static F min(F a, F b) { return a < b ? a : b; }
  static F fmadd(F a, F b, F c) { return std::fma(a, b, c); }
  static F select_negative(F x, F if_negative, F otherwise) {
    return x < 0.0f ? if_negative : otherwise;
  }
  static F round_int(F x) { return std::nearbyint(x); }
  static F trunc_int(F x) { return std::trunc(x); }
  static F abs(F x) { return std::fabs(x); }
  static F sqrt(F x) { return std::sqrt(x); }
  static F select_less(F a, F b, F if_less, F otherwise) { return a < b ? if_less : otherwise; }
  static F select_nan(F x, F if_nan, F otherwise) { return std::isnan(x) ? if_nan : otherwise; }
  static F fill_tail(F v, int n, float fill) { return n >= 1 ? v : fill; }
  static float reduce_add(F v) { return v; }
  static float reduce_max(F v) { return v; }
  static F get_exponent(F x) {
    return x == 0.0f || !std::isfinite(x) ? 0.0f : static_cast<float>(std::ilogb(x));
  }
  static F get_mantissa(F x) {
    return x == 0.0f || !std::isfinite(x) ? 1.0f : std::scalbn(std::fabs(x), -std::ilogb(x));
  }
  static F scale2(F x, F n) {
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float s;
    std::memcpy(&s, &bits, sizeof s);
    return x * s;
  }
};

}  // namespace mixprec::kernels::simd
