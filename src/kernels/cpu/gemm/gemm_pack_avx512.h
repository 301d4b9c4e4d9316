#pragma once
// Packing with AVX-512: 16 rows x 16 words (f32, or bf16 pairs) are loaded as 16 vectors,
// transposed in registers (unpack 32, unpack 64, two 128-bit lane shuffles: 64 shuffles per 256
// words) and stored as 16 runs of words, one per k (or k pair). That replaces a strided store
// per word. Used for A micro-panels, for B panels of a transposed B, and by transpose_2d. Include only from *_avx512*.cpp (internal linkage; see
// simd_avx512.h).
#include <immintrin.h>

#include <cstdint>

namespace mixprec::kernels::gemm_detail {
namespace {

// Transposes a 16 x 16 block of 32-bit words in registers: column[c] = word c of rows 0..15.
inline void transpose_16x16(const __m512i (&rows)[16], __m512i (&column)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + j], lane L: column 4L + j of rows 4g .. 4g + 3
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // 4x4 transpose of 128-bit lanes across u[j], u[4+j], u[8+j], u[12+j]
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    column[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    column[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    column[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    column[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// rows[i] holds 16 words of row i; writes word j of rows 0..lanes-1 to out + j * out_stride for
// the first `cols` columns j.
inline void transpose_store_16x16(const __m512i (&rows)[16], int lanes, int cols, uint32_t* out,
                                  int64_t out_stride) {
  __m512i column[16];
  transpose_16x16(rows, column);
  const __mmask16 keep = static_cast<__mmask16>((1u << lanes) - 1u);
  for (int c = 0; c < cols; ++c) _mm512_mask_storeu_epi32(out + c * out_stride, keep, column[c]);
}

// The first n (<= 32) 16-bit lanes.
inline __mmask32 first_halves(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1u;
}

// Packs `height` rows (<= mr <= 16) of 32-bit words into one micro-panel [words][mr]:
// load(i, w0, n) returns words w0 .. w0 + n - 1 of row i (n <= 16, zero past n).
template <typename Load>
void pack_panel_words(int height, int mr, int64_t words, uint32_t* panel, const Load& load) {
  __m512i rows[16];
  for (int64_t w0 = 0; w0 < words; w0 += 16) {
    const int n = static_cast<int>(words - w0 < 16 ? words - w0 : 16);
    for (int i = 0; i < 16; ++i) rows[i] = i < height ? load(i, w0, n) : _mm512_setzero_si512();
    transpose_store_16x16(rows, mr, n, panel + w0 * mr, mr);
  }
}

}  // namespace
}  // namespace mixprec::kernels::gemm_detail
