// transpose_2d's sub-blocks on AVX-512: in-register shuffles (16 per 64 four-byte elements,
// about 10 per 64 two-byte ones) instead of a scalar load and store per element.
#include <cstring>
#include <type_traits>

#include "../gemm/gemm_pack_avx512.h"
#include "transpose_internal.h"

namespace mixprec::kernels::transpose_detail {

// 32 x 32 two-byte elements. Source rows 2i and 2i + 1 are interleaved into words
// (src[2i][c], src[2i + 1][c]); transposing those 16 x 16 words puts, in word vector c, the 32
// elements of source column c in row order: destination row c. unpack{lo,hi}_epi16 work within
// 128-bit lanes, so word w of `lo` holds column 8 (w / 4) + w % 4 and of `hi` that plus 4.
void sub_block_2byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst) {
  const auto* s = static_cast<const uint16_t*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  __m512i lo[16], hi[16];
  for (int i = 0; i < 16; ++i) {
    const __m512i r0 = _mm512_loadu_si512(s + 2 * i * ld_src);
    const __m512i r1 = _mm512_loadu_si512(s + (2 * i + 1) * ld_src);
    lo[i] = _mm512_unpacklo_epi16(r0, r1);
    hi[i] = _mm512_unpackhi_epi16(r0, r1);
  }
  __m512i column[16];
  gemm_detail::transpose_16x16(lo, column);
  for (int w = 0; w < 16; ++w) _mm512_storeu_si512(d + (8 * (w / 4) + w % 4) * ld_dst, column[w]);
  gemm_detail::transpose_16x16(hi, column);
  for (int w = 0; w < 16; ++w)
    _mm512_storeu_si512(d + (8 * (w / 4) + w % 4 + 4) * ld_dst, column[w]);
}

// Narrow blocks, one vector of pixels at a time: the chunk's C registers are read whole, and
// each output register is C / 2 two-source permutes (vpermt2w / vpermt2d, which index two
// registers at once) merged under lane masks. From pixels, output register k (channel k of the
// chunk's pixels) takes lane p from element p * C + k of the chunk, in source register pair
// (p * C + k) / (2 * lanes); the permute reads the index modulo 2 * lanes, so one index vector
// serves every pair and only the mask picks the pair. To pixels, output register q takes lane l
// (pixel (q * lanes + l) / C, channel l % C) from row l % C, in row pair (l % C) / 2.
namespace {

// The two-source permute, lane merge and lane arithmetic for elements of kBytes (2 or 4).
template <int kBytes>
struct Lanes {
  static constexpr int kCount = 64 / kBytes;
  using Mask = std::conditional_t<kBytes == 2, __mmask32, __mmask16>;
  static __m512i permute(__m512i a, __m512i idx, __m512i b) {
    if constexpr (kBytes == 2) return _mm512_permutex2var_epi16(a, idx, b);
    else return _mm512_permutex2var_epi32(a, idx, b);
  }
  static __m512i merge(__m512i acc, Mask m, __m512i v) {
    if constexpr (kBytes == 2) return _mm512_mask_mov_epi16(acc, m, v);
    else return _mm512_mask_mov_epi32(acc, m, v);
  }
  static __m512i add(__m512i a, int v) {
    if constexpr (kBytes == 2) return _mm512_add_epi16(a, _mm512_set1_epi16(static_cast<int16_t>(v)));
    else return _mm512_add_epi32(a, _mm512_set1_epi32(v));
  }
};

// A vector of per-lane values f(lane), as the lane width's integers.
template <int kBytes, typename F>
__m512i lane_vector(F f) {
  alignas(64) uint8_t bytes[64];
  for (int l = 0; l < Lanes<kBytes>::kCount; ++l) {
    const auto v = static_cast<uint32_t>(f(l));
    std::memcpy(bytes + l * kBytes, &v, kBytes);  // little-endian: the low bytes
  }
  return _mm512_load_si512(bytes);
}

template <int kBytes>
int64_t from_pixels(const void* src, int64_t pixels, int64_t channels, int64_t ld_dst, void* dst) {
  using V = Lanes<kBytes>;
  constexpr int L = V::kCount;
  const int c = static_cast<int>(channels), pair_lanes = 2 * L / c;
  const __m512i base = lane_vector<kBytes>([&](int p) { return p * c; });
  typename V::Mask pair_mask[8];  // the output lanes source register pair j fills
  for (int j = 0; j < c / 2; ++j)
    pair_mask[j] = static_cast<typename V::Mask>(((uint64_t{1} << pair_lanes) - 1) << (j * pair_lanes));
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const int64_t whole = pixels / L * L;
  __m512i r[16];
  for (int64_t p0 = 0; p0 < whole; p0 += L) {
    for (int i = 0; i < c; ++i) r[i] = _mm512_loadu_si512(s + (p0 * c + i * L) * kBytes);
    for (int k = 0; k < c; ++k) {
      const __m512i idx = V::add(base, k);
      __m512i out = V::permute(r[0], idx, r[1]);
      for (int j = 1; j < c / 2; ++j)
        out = V::merge(out, pair_mask[j], V::permute(r[2 * j], idx, r[2 * j + 1]));
      _mm512_storeu_si512(d + (k * ld_dst + p0) * kBytes, out);
    }
  }
  return whole;
}

template <int kBytes>
int64_t to_pixels(const void* src, int64_t pixels, int64_t channels, int64_t ld_src, void* dst) {
  using V = Lanes<kBytes>;
  constexpr int L = V::kCount;
  const int c = static_cast<int>(channels);
  // Lane l of output register q: row l % C (the second of its pair when odd), pixel
  // q * L / C + l / C; the pair is picked by the mask.
  const __m512i base = lane_vector<kBytes>([&](int l) { return (l % c & 1) * L + l / c; });
  uint64_t first_pair = 0;
  for (int l = 0; l < L; ++l)
    if (l % c < 2) first_pair |= uint64_t{1} << l;
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  const int64_t whole = pixels / L * L;
  __m512i r[16];
  for (int64_t p0 = 0; p0 < whole; p0 += L) {
    for (int k = 0; k < c; ++k) r[k] = _mm512_loadu_si512(s + (k * ld_src + p0) * kBytes);
    for (int q = 0; q < c; ++q) {
      const __m512i idx = V::add(base, q * L / c);
      __m512i out = V::permute(r[0], idx, r[1]);
      for (int m = 1; m < c / 2; ++m)
        out = V::merge(out, static_cast<typename V::Mask>(first_pair << (2 * m)),
                       V::permute(r[2 * m], idx, r[2 * m + 1]));
      _mm512_storeu_si512(d + (p0 * c + q * L) * kBytes, out);
    }
  }
  return whole;
}

}  // namespace

int64_t from_pixels_2byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_dst,
                                 void* dst) {
  return from_pixels<2>(src, pixels, channels, ld_dst, dst);
}
int64_t from_pixels_4byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_dst,
                                 void* dst) {
  return from_pixels<4>(src, pixels, channels, ld_dst, dst);
}
int64_t to_pixels_2byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_src,
                               void* dst) {
  return to_pixels<2>(src, pixels, channels, ld_src, dst);
}
int64_t to_pixels_4byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_src,
                               void* dst) {
  return to_pixels<4>(src, pixels, channels, ld_src, dst);
}

void sub_block_4byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst) {
  const auto* s = static_cast<const uint32_t*>(src);
  __m512i rows[16];
  for (int i = 0; i < 16; ++i) rows[i] = _mm512_loadu_si512(s + i * ld_src);
  gemm_detail::transpose_store_16x16(rows, 16, 16, static_cast<uint32_t*>(dst), ld_dst);
}

}  // namespace mixprec::kernels::transpose_detail
