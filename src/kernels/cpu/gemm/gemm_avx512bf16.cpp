// AVX512_BF16 GEMM micro-kernel: 14 x 32 tile of f32 accumulators fed by vdpbf16ps, which
// multiplies a pair of bf16 from A (broadcast as one 32-bit word) with 16 column pairs of B and
// adds both products to each f32 lane.
//
// The instruction's own rules (Intel SDM, VDPBF16PS): round to nearest even, MXCSR ignored,
// bf16 subnormal inputs treated as zero and subnormal f32 results flushed to zero. The two
// products of a pair are exact in f32 and are added one after the other, so apart from that
// flushing the accumulation is as precise as f32 FMA. See docs/NUMERICS.md.
#include <algorithm>
#include <cstring>

#include "gemm_pack_avx512.h"
#include "gemm_tile.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kMr = 14;
constexpr int kNv = 2;
constexpr int kNr = kNv * simd::Avx512::kWidth;

inline __m512bh broadcast_pair(const uint16_t* p) {
  uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
}

template <int MR>
void tile_bf16(int64_t k, const void* a_panel, const void* b_panel, int nr_eff,
               const TileEpilogue& ep) {
  const uint16_t* a = static_cast<const uint16_t*>(a_panel);  // [ceil(k/2)][kMr][2]
  const uint16_t* b = static_cast<const uint16_t*>(b_panel);  // [ceil(k/2)][kNr][2]
  __m512 acc[MR][kNv];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNv; ++j) acc[i][j] = _mm512_setzero_ps();
  // An odd k's last pair holds one k: both packers zero its partner, so it runs as any pair.
  const int64_t pairs = (k + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[kNv];
    for (int j = 0; j < kNv; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + (p * kNr + j * 16) * 2);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = broadcast_pair(a + (p * kMr + i) * 2);
      for (int j = 0; j < kNv; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  finish_tile<simd::Avx512, MR, kNv>(acc, nr_eff, ep);
}

// Word j of the first / second half of two interleaved rows: (row0[j], row1[j]) for j = 0..15 /
// 16..31 (vpermt2w indices: row1's lanes are 32 on).
alignas(64) constexpr uint16_t kFirst[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                             37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                             11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) constexpr uint16_t kSecond[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                              53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                              27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

// B panels for vdpbf16ps: [k_padded / 2][kNr] 32-bit words, each word the bf16 pair
// (B[2p, j], B[2p + 1, j]); past the last row or column, zeros.
void pack_b_bf16(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, void* out) {
  const uint16_t* src = static_cast<const uint16_t*>(b.data);
  const int64_t k = b.rows, pairs = k_padded / 2;
  for (int64_t n = n0; n < n1; n += kNr) {
    uint32_t* panel = static_cast<uint32_t*>(out) + (n - n0) / kNr * pairs * kNr;
    const int width = static_cast<int>(n1 - n < kNr ? n1 - n : kNr);
    if (b.col_stride == 1) {  // rows contiguous: interleave the 16-bit lanes of two rows
      const __m512i first = _mm512_load_si512(kFirst), second = _mm512_load_si512(kSecond);
      const __mmask32 m = first_halves(width);
      for (int64_t p = 0; p < pairs; ++p) {
        const uint16_t* row0 = src + 2 * p * b.row_stride + n;
        // Eight pairs ahead: one line per row, rows row_stride apart.
        _mm_prefetch(reinterpret_cast<const char*>(row0 + 16 * b.row_stride), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row0 + 17 * b.row_stride), _MM_HINT_T0);
        const __m512i r0 = _mm512_maskz_loadu_epi16(m, row0);
        const __m512i r1 =
            2 * p + 1 < k ? _mm512_maskz_loadu_epi16(m, row0 + b.row_stride) : _mm512_setzero_si512();
        _mm512_storeu_si512(panel + p * kNr, _mm512_permutex2var_epi16(r0, first, r1));
        _mm512_storeu_si512(panel + p * kNr + 16, _mm512_permutex2var_epi16(r0, second, r1));
      }
    } else if (b.row_stride == 1) {  // columns contiguous (B = W^T): a pair is one word
      // 16 columns x 16 pairs at a time, transposed in registers: column j's pairs become
      // word j of 16 consecutive panel rows.
      for (int v = 0; v < kNv; ++v) {
        __m512i cols[16];
        for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
          const int words = static_cast<int>(pairs - p0 < 16 ? pairs - p0 : 16);
          const int64_t elements = std::min<int64_t>(32, k - 2 * p0);  // an odd k's partner: 0
          const __mmask32 m = first_halves(elements);
          for (int j = 0; j < 16; ++j) {
            const uint16_t* col = src + (n + 16 * v + j) * b.col_stride + 2 * p0;
            // The next 16 columns' words (as for A's panels, below).
            _mm_prefetch(reinterpret_cast<const char*>(col + 16 * b.col_stride), _MM_HINT_T0);
            cols[j] =
                16 * v + j < width ? _mm512_maskz_loadu_epi16(m, col) : _mm512_setzero_si512();
          }
          transpose_store_16x16(cols, 16, words, panel + p0 * kNr + 16 * v, kNr);
        }
      }
    } else {
      pack_b_generic(b, n, n + width, k_padded, kNr, DType::BF16, panel);
    }
  }
}

// A rows into [k_padded / 2][kMr] 32-bit words, each the bf16 pair (A[i, 2p], A[i, 2p + 1]):
// a transpose of 32-bit words (gemm_pack_avx512.h); an odd K's last pair is (A[i, K-1], 0).
// A stored transposed (A[i, k] at k * col_stride + i, as dY^T of a linear layer's dW): a pair of
// A's columns is a pair of the stored rows, so a panel's words are the 16-bit lanes of two rows
// interleaved, as B's row-contiguous panels are: two loads, one permute and one store per pair.
void pack_a_bf16_transposed(const MatrixView& a, int64_t m0, int rows, int64_t k_padded,
                            void* out) {
  const int64_t k = a.cols, pairs = k_padded / 2, ld = a.col_stride;
  const __m512i first = _mm512_load_si512(kFirst);
  constexpr __mmask16 kPanelWords = (1u << kMr) - 1u;
  for (int r0 = 0; r0 < rows; r0 += kMr) {
    uint32_t* panel = static_cast<uint32_t*>(out) + r0 / kMr * pairs * kMr;
    const __mmask32 m = first_halves(rows - r0 < kMr ? rows - r0 : kMr);  // zeros past the rows
    const uint16_t* base = static_cast<const uint16_t*>(a.data) + m0 + r0;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* row0 = base + 2 * p * ld;
      // Eight pairs ahead, as for B's rows.
      _mm_prefetch(reinterpret_cast<const char*>(row0 + 16 * ld), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(row0 + 17 * ld), _MM_HINT_T0);
      const __m512i r0v = _mm512_maskz_loadu_epi16(m, row0);
      const __m512i r1v = 2 * p + 1 < k ? _mm512_maskz_loadu_epi16(m, row0 + ld)
                                        : _mm512_setzero_si512();  // an odd k's partner
      _mm512_mask_storeu_epi32(panel + p * kMr, kPanelWords,
                               _mm512_permutex2var_epi16(r0v, first, r1v));
    }
  }
}

void pack_a_bf16(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, void* out) {
  if (a.col_stride != 1)
    return a.row_stride == 1 ? pack_a_bf16_transposed(a, m0, rows, k_padded, out)
                             : pack_a_generic(a, m0, rows, k_padded, kMr, DType::BF16, out);
  const int64_t k = a.cols, pairs = k_padded / 2;
  for (int r0 = 0; r0 < rows; r0 += kMr) {
    uint32_t* panel = static_cast<uint32_t*>(out) + r0 / kMr * pairs * kMr;
    const int height = rows - r0 < kMr ? rows - r0 : kMr;
    const uint16_t* base = static_cast<const uint16_t*>(a.data) + (m0 + r0) * a.row_stride;
    pack_panel_words(height, kMr, pairs, panel, [&](int i, int64_t w0, int n) {
      const uint16_t* row = base + i * a.row_stride + 2 * w0;
      // The same words of the next panel's row: a row of a panel is only K / 32 lines, too
      // short a stream for the hardware prefetcher, and A usually comes cold from the op before
      // (8-10% of a GEMM at the GPT's shapes). A prefetch never faults, past the end included.
      _mm_prefetch(reinterpret_cast<const char*>(row + kMr * a.row_stride), _MM_HINT_T0);
      // 2n elements, but never past the row's k: the odd tail element's partner stays 0.
      const int64_t elements = 2 * w0 + 2 * n <= k ? 2 * n : k - 2 * w0;
      return _mm512_maskz_loadu_epi16(first_halves(elements), row);
    });
  }
}

template <int M>
struct Tile {
  static void run(int64_t k, const void* a, const void* b, int nr_eff, const TileEpilogue& ep) {
    tile_bf16<M>(k, a, b, nr_eff, ep);
  }
};
constexpr auto kTiles = tile_table<Tile>(std::make_index_sequence<kMr>{});

}  // namespace

const Ukernel& ukernel_avx512bf16() {
  static constexpr Ukernel kernel{kMr, kNr, DType::BF16, kTiles.data(), pack_b_bf16, pack_a_bf16};
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
