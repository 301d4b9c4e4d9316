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
//   scale2(x, n)      x * 2^n for integral n (2^n a normal float, unless kScale2AnyExponent:
//                     then any n, the product rounded once)
//   abs sqrt          (sqrt correctly rounded on every level)
//   select_less(a, b, t, f) = a < b ? t : f, per lane (false when either is NaN)
//   select_nan(x, t, f) = x is NaN ? t : f, per lane
//   fill_tail(v, n, c) lanes n and above replaced by c (a tail vector's neutral element)
//   reduce_add(v)     sum of the lanes (order depends on the width); reduce_max(v) their max,
//                     NaN if any lane is NaN
//   get_exponent(x)   floor(log2 |x|) and get_mantissa(x) = |x| / 2^floor(log2 |x|) in [1, 2),
//                     exact for finite nonzero x (subnormals included); other lanes unspecified
//   U                 kWidth u32 lanes, arithmetic modulo 2^32 (the optimizers' random bits):
//                     u_set1(k), u_iota() (lane j holds j), u_add u_mul u_xor u_and,
//                     u_shr(x, n) logical shift right, u_to_float(x) exact for x < 2^24,
//                     bits(v) and from_bits(x) reinterpret f32 lanes as u32 and back
// clang-format on
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::simd {
// Internal linkage, as the other levels (simd_avx512.h says why): ScalarLane is also the base
// of the f64 path, which every level's units compile.
namespace {

// The arithmetic of one lane of T, shared by Scalar (f32) and the f64 path's ScalarF64
// (elementwise_impl.h), which add their loads, stores and the rest.
template <typename T>
struct ScalarLane {
  using F = T;
  static constexpr int kWidth = 1;

  static F zero() { return T(0); }
  static F set1(T x) { return x; }
  static F load(const T* p) { return *p; }
  static void store(T* p, F v) { *p = v; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F max(F a, F b) { return a > b ? a : b; }  // NaN in either: b, as x86 maxps
  static F min(F a, F b) { return a < b ? a : b; }
  static F fmadd(F a, F b, F c) { return std::fma(a, b, c); }
  static F abs(F x) { return std::fabs(x); }
  static F sqrt(F x) { return std::sqrt(x); }
  static F select_nan(F x, F if_nan, F otherwise) { return std::isnan(x) ? if_nan : otherwise; }
  static F fill_tail(F v, int n, T fill) { return n >= 1 ? v : fill; }
  static T reduce_add(F v) { return v; }
  static T reduce_max(F v) { return v; }
};

struct Scalar : ScalarLane<float> {
  static void prefetch(const void*) {}
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
  static F select_negative(F x, F if_negative, F otherwise) {
    return x < 0.0f ? if_negative : otherwise;
  }
  static F round_int(F x) { return std::nearbyint(x); }
  static F trunc_int(F x) { return std::trunc(x); }
  static F select_less(F a, F b, F if_less, F otherwise) { return a < b ? if_less : otherwise; }
  static F get_exponent(F x) {
    return x == 0.0f || !std::isfinite(x) ? 0.0f : static_cast<float>(std::ilogb(x));
  }
  static F get_mantissa(F x) {
    return x == 0.0f || !std::isfinite(x) ? 1.0f : std::scalbn(std::fabs(x), -std::ilogb(x));
  }
  static constexpr bool kScale2AnyExponent = false;  // 2^n is built from its exponent bits
  static F scale2(F x, F n) {
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float s;
    std::memcpy(&s, &bits, sizeof s);
    return x * s;
  }

  using U = uint32_t;
  static U u_set1(uint32_t k) { return k; }
  static U u_iota() { return 0; }
  static U u_add(U a, U b) { return a + b; }
  static U u_mul(U a, U b) { return a * b; }
  static U u_xor(U a, U b) { return a ^ b; }
  static U u_and(U a, U b) { return a & b; }
  static U u_shr(U x, int n) { return x >> n; }
  static F u_to_float(U x) { return static_cast<float>(x); }
  static U bits(F v) {
    U u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  }
  static F from_bits(U u) {
    F v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
};

}  // namespace
}  // namespace mixprec::kernels::simd
