#pragma once
// The SIMD interface (see simd_scalar.h) at 16 f32 lanes. Include only from AVX-512
// translation units (*_avx512*.cpp, *_amx.cpp, the generated kernel_levels/*_avx512.cpp). Everything here lives in an anonymous namespace on purpose: these
// functions are compiled with AVX-512 enabled, and internal linkage keeps the linker from
// ever picking one of them for code that must run on a CPU without AVX-512.
#include <immintrin.h>

#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::simd {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;

  static __mmask16 mask(int n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
  }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  // Up to 16 f32 `stride` elements apart (|stride| < 2^27), lanes past n zero: vgatherdps, for
  // an operand whose innermost dim is strided (a channels_last tensor met in plain order).
  static F gather_f32(const float* p, int64_t stride, int n) {
    const __m512i index = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int>(stride)));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask(n), index, p, 4);
  }
  // The first n lanes of v to f32 `stride` elements apart (|stride| < 2^27, not 0): vscatterdps.
  static void scatter_f32(float* p, int64_t stride, F v, int n) {
    const __m512i index = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(static_cast<int>(stride)));
    _mm512_mask_i32scatter_ps(p, mask(n), index, v, 4);
  }

  static F widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // f32 -> bf16 round to nearest even in integer arithmetic: bit-exact with
  // fp16_bits::f32_to_bf16, subnormals kept (vcvtneps2bf16 would flush them). The rounding
  // leaves each bf16 in its lane's high half, and one word permute gathers the high halves:
  // vpmovdw (the obvious narrowing) is two uops, and its fused store form is slow on AMD.
  static __m256i narrow_bf16(F v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    const __mmask16 nan = _mm512_cmp_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000), _MM_CMPINT_NLE);
    // NaN: quieted, its payload truncated.
    const __m512i bits = _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
    const __m512i high_halves = _mm512_setr_epi32(  // word i <- word 2i + 1, i < 16
        0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015, 0x001B0019,
        0x001F001D, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi16(high_halves, bits));
  }

  static F load_n(const void* p, DType t, int n) {
    const __mmask16 m = mask(n);
    switch (t) {
      case DType::F32:
        return _mm512_maskz_loadu_ps(m, p);
      case DType::F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
      case DType::BF16:
        return widen_bf16(_mm256_maskz_loadu_epi16(m, p));
      default:
        return zero();
    }
  }
  // v rounded to dtype t and widened back: what store_n then load_n would give, in registers.
  static F round_to(DType t, F v) {
    switch (t) {
      case DType::F16:
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      case DType::BF16:
        return widen_bf16(narrow_bf16(v));
      default:
        return v;
    }
  }
  static void store_n(void* p, DType t, F v, int n) {
    const __mmask16 m = mask(n);
    switch (t) {
      case DType::F32:
        _mm512_mask_storeu_ps(p, m, v);
        break;
      case DType::F16:
        _mm256_mask_storeu_epi16(p, m,
                                 _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
      case DType::BF16:
        _mm256_mask_storeu_epi16(p, m, narrow_bf16(v));
        break;
      default:
        break;
    }
  }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F select_negative(F x, F if_negative, F otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero(), _CMP_LT_OQ), otherwise, if_negative);
  }
  static F round_int(F x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static F trunc_int(F x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  }
  static F abs(F x) { return _mm512_abs_ps(x); }
  static F sqrt(F x) { return _mm512_sqrt_ps(x); }
  static F select_less(F a, F b, F if_less, F otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, if_less);
  }
  static F select_nan(F x, F if_nan, F otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), otherwise, if_nan);
  }
  static F fill_tail(F v, int n, float fill) {
    return _mm512_mask_blend_ps(mask(n), _mm512_set1_ps(fill), v);
  }
  static float reduce_add(F v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(F v) {
    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0) return __builtin_nanf("");
    return _mm512_reduce_max_ps(v);
  }
  static F get_exponent(F x) { return _mm512_getexp_ps(x); }
  static F get_mantissa(F x) { return _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero); }
  // vscalefps: x * 2^n rounded once, in one instruction, for any integral n (in the normal
  // exponent range the same result as multiplying by the power of two).
  static constexpr bool kScale2AnyExponent = true;
  static F scale2(F x, F n) { return _mm512_scalef_ps(x, n); }

  using U = __m512i;
  static U u_set1(uint32_t k) { return _mm512_set1_epi32(static_cast<int>(k)); }
  static U u_iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static U u_add(U a, U b) { return _mm512_add_epi32(a, b); }
  static U u_mul(U a, U b) { return _mm512_mullo_epi32(a, b); }
  static U u_xor(U a, U b) { return _mm512_xor_si512(a, b); }
  static U u_and(U a, U b) { return _mm512_and_si512(a, b); }
  static U u_shr(U x, int n) { return _mm512_srli_epi32(x, static_cast<unsigned>(n)); }
  static F u_to_float(U x) { return _mm512_cvtepi32_ps(x); }
  static U bits(F v) { return _mm512_castps_si512(v); }
  static F from_bits(U u) { return _mm512_castsi512_ps(u); }
};

}  // namespace
}  // namespace mixprec::kernels::simd
