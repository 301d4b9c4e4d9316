// Packing bf16 convolution weights into the vdpbf16ps / AMX panel layout (conv_direct.h): the
// per-call weight packing of a bf16 convolution. Up to 16 taps (3x3 and the like) by in-register
// transposes; more taps with AVX-512 gathers.
#include <immintrin.h>

#include "conv_direct.h"
#include "../gemm/gemm_pack_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

// taps <= 16: for output channel o and channel pair p the 2 * taps weights w[o][2p][.] and
// w[o][2p + 1][.] are contiguous; one masked load and a word permutation make the taps' panel
// words (w[o][2p][t], w[o][2p + 1][t]) a row of dwords, and a 16 x 16 transpose turns 16 output
// channels' rows into one 16-word store per tap.
void pack_panel_by_transpose(const uint16_t* w, int64_t o0, int width, int64_t cg, int64_t taps,
                             uint32_t* panel) {
  const int64_t pairs = cg / 2;
  alignas(64) uint16_t perm[32] = {};
  for (int t = 0; t < taps; ++t) {
    perm[2 * t] = static_cast<uint16_t>(t);
    perm[2 * t + 1] = static_cast<uint16_t>(taps + t);
  }
  const __m512i words = _mm512_load_si512(perm);
  const __mmask32 run = gemm_detail::first_halves(2 * taps);
  for (int half = 0; half < 2; ++half) {
    const int lanes = width - 16 * half;
    for (int64_t p = 0; p < pairs; ++p) {
      __m512i rows[16];
      for (int o = 0; o < 16; ++o)
        rows[o] = o < lanes ? _mm512_permutexvar_epi16(
                                  words, _mm512_maskz_loadu_epi16(
                                             run, w + ((o0 + 16 * half + o) * cg + 2 * p) * taps))
                            : _mm512_setzero_si512();
      __m512i tap_words[16];
      gemm_detail::transpose_16x16(rows, tap_words);
      for (int64_t t = 0; t < taps; ++t)
        _mm512_storeu_si512(panel + (t * pairs + p) * 32 + 16 * half, tap_words[t]);
    }
  }
}

}  // namespace

void pack_bf16_panel_avx512(const uint16_t* w, int64_t total_elems, int64_t o0, int width,
                            int64_t cg, int64_t taps, uint32_t* panel) {
  if (taps <= 16) return pack_panel_by_transpose(w, o0, width, cg, taps, panel);
  const int64_t o_stride = cg * taps;  // elements between output channels
  const int64_t pairs = cg / 2;
  const char* base = reinterpret_cast<const char*>(w);
  for (int half = 0; half < 2; ++half) {
    const int lanes = width - 16 * half;
    const __mmask16 live = lanes >= 16  ? __mmask16(0xFFFF)
                           : lanes <= 0 ? __mmask16(0)
                                        : __mmask16((1u << lanes) - 1u);
    // Byte offset of w[o0 + 16 half + lane][0][0] (int32: the whole tensor is far below 2 GiB
    // when it reaches here, checked by the caller).
    const __m512i lane_offset = _mm512_mullo_epi32(
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(o0 + 16 * half)),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
        _mm512_set1_epi32(static_cast<int>(o_stride * 2)));
    const int64_t last_o = o0 + 16 * half + (lanes > 16 ? 16 : lanes) - 1;
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t t = 0; t < taps; ++t) {
        uint32_t* out = panel + (t * pairs + p) * 32 + 16 * half;
        if (lanes <= 0) {
          _mm512_storeu_si512(out, _mm512_setzero_si512());
          continue;
        }
        const int64_t e0 = 2 * p * taps + t, e1 = e0 + taps;  // w[o][2p][t], w[o][2p + 1][t]
        // A 32-bit gather reads one element past each: scalar where that passes the end.
        if (last_o * o_stride + e1 + 1 >= total_elems) {
          for (int o = 0; o < 16; ++o) {
            const int64_t oo = o0 + 16 * half + o;
            out[o] = o < lanes ? static_cast<uint32_t>(w[oo * o_stride + e0]) |
                                     static_cast<uint32_t>(w[oo * o_stride + e1]) << 16
                               : 0u;
          }
          continue;
        }
        const __m512i i0 =
            _mm512_add_epi32(lane_offset, _mm512_set1_epi32(static_cast<int>(e0 * 2)));
        const __m512i i1 =
            _mm512_add_epi32(lane_offset, _mm512_set1_epi32(static_cast<int>(e1 * 2)));
        const __m512i g0 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, i0, base, 1);
        const __m512i g1 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, i1, base, 1);
        const __m512i word = _mm512_or_si512(_mm512_and_si512(g0, _mm512_set1_epi32(0xFFFF)),
                                             _mm512_slli_epi32(g1, 16));
        _mm512_storeu_si512(out, word);
      }
  }
}

}  // namespace mixprec::kernels::conv_detail
