// transpose_2d's sub-blocks on AVX-512: in-register shuffles (16 per 64 four-byte elements,
// about 10 per 64 two-byte ones) instead of a scalar load and store per element.
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

void sub_block_4byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst) {
  const auto* s = static_cast<const uint32_t*>(src);
  __m512i rows[16];
  for (int i = 0; i < 16; ++i) rows[i] = _mm512_loadu_si512(s + i * ld_src);
  gemm_detail::transpose_store_16x16(rows, 16, 16, static_cast<uint32_t*>(dst), ld_dst);
}

}  // namespace mixprec::kernels::transpose_detail
