// f32 <-> f16 <-> bf16 conversion kernels for AVX2 + F16C, 8 lanes per step (16 per loop
// iteration). Bit-exact with the scalar rules of core/float16.h: vcvtps2ph / vcvtph2ps follow
// them exactly given an explicit RNE immediate (F16C ignores MXCSR.DAZ/FTZ and keeps
// subnormals), and f32 -> bf16 uses the scalar code's integer rounding formula. Tails shorter
// than a vector, and the unaligned head of a streaming run, go to the scalar reference.
//
// Compiled with -mavx2 -mfma -mf16c. ODR hazard (convert_kernels.h): an inline function or
// template from a shared header would be emitted here with AVX2 instructions and the linker
// could keep that copy for scalar callers on a CPU without AVX2. So everything below is in an
// anonymous namespace, only <immintrin.h>, <cstddef>, <cstdint> and the declarations-only
// convert_kernels.h are included, and the scalar fallbacks are the non-inline *_scalar
// functions compiled in convert.cpp.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "convert_kernels.h"

namespace mixprec::kernels::convert_detail {
namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

struct LoadF32 {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};

struct LoadF16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// A shift, then NaNs are quieted (bit 22) as fp16_bits::bf16_to_f32 does.
struct LoadBf16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m256i u = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    return _mm256_castsi256_ps(
        _mm256_or_si256(u, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000))));
  }
};

struct NarrowF16 {
  static __m128i narrow(__m256 v) { return _mm256_cvtps_ph(v, kRne); }
};

// fp16_bits::f32_to_bf16's formula: add 0x7FFF plus the lowest kept bit, keep the top half; a
// NaN keeps its top bits and is quieted.
struct NarrowBf16 {
  static __m128i narrow(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    // Each lane is <= 0xFFFF, so the signed-to-unsigned saturating pack is exact.
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  }
};

template <typename Narrow>
struct Store16 {
  using T = uint16_t;
  static __m256i line(__m256 lo, __m256 hi) {
    return _mm256_inserti128_si256(_mm256_zextsi128_si256(Narrow::narrow(lo)), Narrow::narrow(hi),
                                   1);
  }
  static void store16(uint16_t* p, __m256 lo, __m256 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), line(lo, hi));
  }
  static void stream16(uint16_t* p, __m256 lo, __m256 hi) {  // p is 32-byte aligned
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), line(lo, hi));
  }
};

struct StoreF32 {
  using T = float;
  static void store16(float* p, __m256 lo, __m256 hi) {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  static void stream16(float* p, __m256 lo, __m256 hi) {  // p is 32-byte aligned
    _mm256_stream_ps(p, lo);
    _mm256_stream_ps(p + 8, hi);
  }
};

template <typename Load, typename Store, ContiguousFn* Scalar>
void convert_contiguous(const void* src, void* dst, std::size_t n, bool stream) {
  using D = typename Store::T;
  const auto* s = static_cast<const typename Load::T*>(src);
  auto* d = static_cast<D*>(dst);
  std::size_t i = 0;
  const auto address = reinterpret_cast<uintptr_t>(d);
  if (stream && address % sizeof(D) == 0) {
    std::size_t head = ((32 - address % 32) % 32) / sizeof(D);  // to a 32-byte boundary
    if (head > n) head = n;
    Scalar(s, d, head, false);
    for (i = head; i + 16 <= n; i += 16)
      Store::stream16(d + i, Load::load(s + i), Load::load(s + i + 8));
    _mm_sfence();
  } else {
    for (; i + 16 <= n; i += 16) Store::store16(d + i, Load::load(s + i), Load::load(s + i + 8));
  }
  Scalar(s + i, d + i, n - i, false);
}

// Gather a block, convert it contiguously, scatter it.
template <typename Load, typename Store, ContiguousFn* Scalar>
void convert_strided(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                     std::size_t n) {
  using S = typename Load::T;
  using D = typename Store::T;
  constexpr std::size_t kBlock = 512;
  alignas(32) S in[kBlock];
  alignas(32) D out[kBlock];
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t count = n - done < kBlock ? n - done : kBlock;
    const S* s = static_cast<const S*>(src) + static_cast<int64_t>(done) * src_stride;
    D* d = static_cast<D*>(dst) + static_cast<int64_t>(done) * dst_stride;
    if (src_stride != 1) {
      for (std::size_t k = 0; k < count; ++k) in[k] = s[static_cast<int64_t>(k) * src_stride];
      s = in;
    }
    convert_contiguous<Load, Store, Scalar>(s, dst_stride == 1 ? d : out, count, false);
    if (dst_stride != 1)
      for (std::size_t k = 0; k < count; ++k) d[static_cast<int64_t>(k) * dst_stride] = out[k];
  }
}

}  // namespace

#define MIXPREC_CONVERT_DEFINE_AVX2(pair, Load, Store)                                         \
  void pair##_avx2(const void* src, void* dst, std::size_t n, bool stream) {                   \
    convert_contiguous<Load, Store, pair##_scalar>(src, dst, n, stream);                       \
  }                                                                                            \
  void pair##_strided_avx2(const void* src, int64_t src_stride, void* dst, int64_t dst_stride, \
                           std::size_t n) {                                                    \
    convert_strided<Load, Store, pair##_scalar>(src, src_stride, dst, dst_stride, n);          \
  }

MIXPREC_CONVERT_DEFINE_AVX2(f32_to_f16, LoadF32, Store16<NarrowF16>)
MIXPREC_CONVERT_DEFINE_AVX2(f16_to_f32, LoadF16, StoreF32)
MIXPREC_CONVERT_DEFINE_AVX2(f32_to_bf16, LoadF32, Store16<NarrowBf16>)
MIXPREC_CONVERT_DEFINE_AVX2(bf16_to_f32, LoadBf16, StoreF32)
MIXPREC_CONVERT_DEFINE_AVX2(f16_to_bf16, LoadF16, Store16<NarrowBf16>)
MIXPREC_CONVERT_DEFINE_AVX2(bf16_to_f16, LoadBf16, Store16<NarrowF16>)
#undef MIXPREC_CONVERT_DEFINE_AVX2

}  // namespace mixprec::kernels::convert_detail
