#pragma once
// The SIMD interface (see simd_scalar.h) at 8 f32 lanes, AVX2 + FMA + F16C. Include only from
// *_avx2.cpp translation units (the generated kernel_levels/ ones included); internal linkage
// for the reason given in simd_avx512.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::simd {
namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int kWidth = 8;

  static __m256i mask(int n) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }

  // 16-bit loads and stores have no AVX2 mask form: a partial vector goes through a buffer.
  static __m128i load_u16(const void* p, int n) {
    if (n >= 8) return _mm_loadu_si128(static_cast<const __m128i*>(p));
    alignas(16) uint16_t buf[8] = {};
    if (n > 0) std::memcpy(buf, p, static_cast<std::size_t>(n) * 2);
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  static void store_u16(void* p, __m128i v, int n) {
    if (n >= 8) return _mm_storeu_si128(static_cast<__m128i*>(p), v);
    alignas(16) uint16_t buf[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(buf), v);
    if (n > 0) std::memcpy(p, buf, static_cast<std::size_t>(n) * 2);
  }
  // f32 -> bf16 round to nearest even, bit-exact with fp16_bits::f32_to_bf16.
  static __m128i narrow_bf16(F v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // Pack the 32-bit lanes (all <= 0xFFFF) to 16 bits, then undo packus's lane interleave.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
  }

  static F load_n(const void* p, DType t, int n) {
    switch (t) {
      case DType::F32:
        return n >= 8 ? _mm256_loadu_ps(static_cast<const float*>(p))
                      : _mm256_maskload_ps(static_cast<const float*>(p), mask(n));
      case DType::F16:
        return _mm256_cvtph_ps(load_u16(p, n));
      case DType::BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load_u16(p, n)), 16));
      default:
        return zero();
    }
  }
  // v rounded to dtype t and widened back: what store_n then load_n would give, in registers.
  static F round_to(DType t, F v) {
    switch (t) {
      case DType::F16:
        return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      case DType::BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(narrow_bf16(v)), 16));
      default:
        return v;
    }
  }
  static void store_n(void* p, DType t, F v, int n) {
    switch (t) {
      case DType::F32:
        if (n >= 8)
          _mm256_storeu_ps(static_cast<float*>(p), v);
        else
          _mm256_maskstore_ps(static_cast<float*>(p), mask(n), v);
        break;
      case DType::F16:
        store_u16(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), n);
        break;
      case DType::BF16:
        store_u16(p, narrow_bf16(v), n);
        break;
      default:
        break;
    }
  }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F select_negative(F x, F if_negative, F otherwise) {
    return _mm256_blendv_ps(otherwise, if_negative, _mm256_cmp_ps(x, zero(), _CMP_LT_OQ));
  }
  static F round_int(F x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static F trunc_int(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F abs(F x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static F sqrt(F x) { return _mm256_sqrt_ps(x); }
  static F select_less(F a, F b, F if_less, F otherwise) {
    return _mm256_blendv_ps(otherwise, if_less, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static F select_nan(F x, F if_nan, F otherwise) {
    return _mm256_blendv_ps(otherwise, if_nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static F fill_tail(F v, int n, float fill) {
    return _mm256_blendv_ps(_mm256_set1_ps(fill), v, _mm256_castsi256_ps(mask(n)));
  }
  static float reduce_add(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static float reduce_max(F v) {
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) return __builtin_nanf("");
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  // No getexp/getmant before AVX-512: read the fields, after scaling subnormals by 2^24 into
  // the normal range.
  static __m256i normal_abs_bits(F x, F& subnormal) {
    const F ax = abs(x);
    subnormal = _mm256_cmp_ps(ax, _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_castps_si256(
        _mm256_blendv_ps(ax, _mm256_mul_ps(ax, _mm256_set1_ps(0x1p24f)), subnormal));
  }
  static F get_exponent(F x) {
    F subnormal;
    const __m256i bits = normal_abs_bits(x, subnormal);
    const F e =
        _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
    return _mm256_sub_ps(e, _mm256_and_ps(subnormal, _mm256_set1_ps(24.0f)));
  }
  static F get_mantissa(F x) {
    F subnormal;
    const __m256i bits = normal_abs_bits(x, subnormal);
    return _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_and_si256(bits, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F800000)));
  }
  static constexpr bool kScale2AnyExponent = false;  // 2^n is built from its exponent bits
  static F scale2(F x, F n) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(x, _mm256_castsi256_ps(bits));
  }

  using U = __m256i;
  static U u_set1(uint32_t k) { return _mm256_set1_epi32(static_cast<int>(k)); }
  static U u_iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static U u_add(U a, U b) { return _mm256_add_epi32(a, b); }
  static U u_mul(U a, U b) { return _mm256_mullo_epi32(a, b); }
  static U u_xor(U a, U b) { return _mm256_xor_si256(a, b); }
  static U u_and(U a, U b) { return _mm256_and_si256(a, b); }
  static U u_shr(U x, int n) { return _mm256_srli_epi32(x, n); }
  static F u_to_float(U x) { return _mm256_cvtepi32_ps(x); }
  static U bits(F v) { return _mm256_castps_si256(v); }
  static F from_bits(U u) { return _mm256_castsi256_ps(u); }
};

}  // namespace
}  // namespace mixprec::kernels::simd
