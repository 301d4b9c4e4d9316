#pragma once
// AVX-512 building blocks of the f32/f16/bf16 conversion kernels, shared by convert_avx512.cpp
// and convert_avx512bf16.cpp. Include it only from units compiled with the AVX-512 flags.
//
// Everything here sits in an anonymous namespace, so each including unit gets its own private
// copy with internal linkage: nothing can be merged with a copy built for another ISA (the ODR
// hazard described in convert_kernels.h). Only <immintrin.h> and the C integer headers are
// included; the intrinsics are always-inline builtins, never emitted as out-of-line symbols.
//
// Shape of a kernel: a Load turns 16 source elements into 16 f32 lanes (exact: f16 and bf16
// widen to f32 without rounding), a Store narrows 16 f32 lanes into the destination type and
// writes them. f16 <-> bf16 therefore goes through f32 in registers, as the scalar reference
// does. Tails use masked loads and stores, which never touch memory outside the mask.

// GCC 12's AVX-512 intrinsics build their "undefined" pass-through operands as `__m512i __Y =
// __Y;`, which -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in
// GCC 13). It has to be silenced before <immintrin.h> is read; this header is included first.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace mixprec::kernels::convert_detail {
namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;  // not MXCSR's mode

inline __mmask16 first_lanes(std::size_t count) {  // count <= 16
  return static_cast<__mmask16>((uint32_t{1} << count) - 1u);
}

struct LoadF32 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

// vcvtph2ps: exact; subnormals are converted (never flushed, MXCSR.DAZ does not apply to it);
// a NaN comes out quiet with its payload shifted up, exactly as fp16_bits::f16_to_f32.
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};

// Unsigned 16-bit integers -> f32: zero-extend, then vcvtdq2ps (exact below 2^24).
struct LoadU16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)));
  }
};

// bf16 -> f32 is a 16-bit shift; a NaN is then quieted (bit 22 set) like fp16_bits::bf16_to_f32.
struct LoadBf16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) {
    const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x00400000)));
  }
  static __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// vcvtps2ph with an explicit round-to-nearest-even: subnormal inputs and outputs are kept, a
// NaN comes out quiet with its top 10 payload bits: bit-exact with fp16_bits::f32_to_f16.
// Two 256-bit conversions rather than one 512-bit: on Zen 4 the zmm form made the whole
// (memory-bound) f32 -> f16 kernel 4-10% slower, on Intel they cost the same.
struct NarrowF16 {
  static __m256i narrow(__m512 v) {
    const __m128i lo = _mm256_cvtps_ph(_mm512_castps512_ps256(v), kRne);
    const __m128i hi = _mm256_cvtps_ph(_mm512_extractf32x8_ps(v, 1), kRne);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  }
};

// f32 -> bf16 in integer arithmetic, the same formula as fp16_bits::f32_to_bf16: add 0x7FFF
// plus the lowest kept bit, keep the top half; a NaN keeps its top bits and is quieted.
struct NarrowBf16Rne {
  static __m256i narrow(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
  }
};

// Writes 16-bit results produced by Narrow.
template <typename Narrow>
struct Store16 {
  using T = uint16_t;
  static void store(uint16_t* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Narrow::narrow(v));
  }
  static void store(uint16_t* p, __m512 v, __mmask16 m) {
    _mm256_mask_storeu_epi16(p, m, Narrow::narrow(v));
  }
  static __m512i line(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_zextsi256_si512(Narrow::narrow(lo)), Narrow::narrow(hi), 1);
  }
  static void store32(uint16_t* p, __m512 lo, __m512 hi) { _mm512_storeu_si512(p, line(lo, hi)); }
  static void stream32(uint16_t* p, __m512 lo, __m512 hi) {  // p is 64-byte aligned
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), line(lo, hi));
  }
};

struct StoreF32 {
  using T = float;
  static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
  static void store32(float* p, __m512 lo, __m512 hi) {
    _mm512_storeu_ps(p, lo);
    _mm512_storeu_ps(p + 16, hi);
  }
  static void stream32(float* p, __m512 lo, __m512 hi) {  // p is 64-byte aligned
    _mm512_stream_ps(p, lo);
    _mm512_stream_ps(p + 16, hi);
  }
};

// Up to 32 elements with masks.
template <typename Load, typename Store>
void convert_few(const typename Load::T* s, typename Store::T* d, std::size_t count) {
  if (count >= 16) {
    Store::store(d, Load::load(s));
    s += 16;
    d += 16;
    count -= 16;
  }
  if (count != 0) {
    const __mmask16 m = first_lanes(count);
    Store::store(d, Load::load(s, m), m);
  }
}

template <typename Load, typename Store>
void convert_contiguous(const void* src, void* dst, std::size_t n, bool stream) {
  using D = typename Store::T;
  const auto* s = static_cast<const typename Load::T*>(src);
  auto* d = static_cast<D*>(dst);
  std::size_t i = 0;
  const auto address = reinterpret_cast<uintptr_t>(d);
  if (stream && address % sizeof(D) == 0) {
    // Non-temporal stores want whole aligned lines: peel up to the first 64-byte boundary.
    std::size_t head = ((64 - address % 64) % 64) / sizeof(D);
    if (head > n) head = n;
    convert_few<Load, Store>(s, d, head);
    for (i = head; i + 32 <= n; i += 32)
      Store::stream32(d + i, Load::load(s + i), Load::load(s + i + 16));
    _mm_sfence();  // order the streaming stores before anything that follows (other threads)
  } else {
    for (; i + 32 <= n; i += 32) Store::store32(d + i, Load::load(s + i), Load::load(s + i + 16));
  }
  convert_few<Load, Store>(s + i, d + i, n - i);
}

// Strided: gather a block into a buffer, convert it contiguously, scatter it. A zero or
// negative source stride is fine; dst and src may be the same elements (in place).
template <typename Load, typename Store>
void convert_strided(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                     std::size_t n) {
  using S = typename Load::T;
  using D = typename Store::T;
  constexpr std::size_t kBlock = 512;
  alignas(64) S in[kBlock];
  alignas(64) D out[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t count = n - done < kBlock ? n - done : kBlock;
    const S* s = static_cast<const S*>(src) + static_cast<int64_t>(done) * src_stride;
    D* d = static_cast<D*>(dst) + static_cast<int64_t>(done) * dst_stride;
    if (src_stride != 1) {
      for (std::size_t k = 0; k < count; ++k) in[k] = s[static_cast<int64_t>(k) * src_stride];
      s = in;
    }
    convert_contiguous<Load, Store>(s, dst_stride == 1 ? d : out, count, false);
    if (dst_stride != 1)
      for (std::size_t k = 0; k < count; ++k) d[static_cast<int64_t>(k) * dst_stride] = out[k];
  }
}

}  // namespace
}  // namespace mixprec::kernels::convert_detail

// Defines the two exported kernels of one conversion at one level (see convert_kernels.h).
#define MIXPREC_CONVERT_DEFINE_AVX512(pair, level, Load, Store)                                   \
  void pair##_##level(const void* src, void* dst, std::size_t n, bool stream) {                   \
    convert_contiguous<Load, Store>(src, dst, n, stream);                                         \
  }                                                                                               \
  void pair##_strided_##level(const void* src, int64_t src_stride, void* dst, int64_t dst_stride, \
                              std::size_t n) {                                                    \
    convert_strided<Load, Store>(src, src_stride, dst, dst_stride, n);                            \
  }
