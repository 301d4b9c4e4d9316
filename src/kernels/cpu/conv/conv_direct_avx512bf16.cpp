// Direct convolution tile for AVX512_BF16 (conv_direct.h): MR pixels x 32 output channels,
// vdpbf16ps over channel pairs read in place from the NHWC input. Same instruction rules and
// accumulation order per pair as the GEMM tile (gemm_avx512bf16.cpp, docs/NUMERICS.md). A tile
// with at most 16 columns left (an RGB or few-channel output) runs only the panel's first vector:
// half the instructions, every column's sums the same.
#include <cstring>

#include "conv_direct.h"
#include "../gemm/gemm_tile.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

constexpr int kNv = 2;
constexpr int kNr = kNv * simd::Avx512::kWidth;

// NV: the panel's vectors computed (the panel is kNv wide either way).
template <int MR, int NV>
void direct_bf16(const DirectArgs& d, int nr_eff, const gemm_detail::TileEpilogue& ep) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t pairs = d.cg / 2;
  for (int t = 0; t < d.taps; ++t) {
    const char* a[MR];  // pixel i's channels under this tap
    for (int i = 0; i < MR; ++i) a[i] = static_cast<const char*>(d.a_rows[t * kDirectMaxMr + i]);
    const char* b = static_cast<const char*>(d.b_panel) + d.tap_index[t] * d.b_tap_bytes;
    for (int64_t p = 0; p < pairs; ++p) {
      __m512bh bv[NV];  // [32 columns][2] bf16: the weights of channels 2p, 2p + 1
      for (int j = 0; j < NV; ++j) bv[j] = (__m512bh)_mm512_loadu_si512(b + p * kNr * 4 + j * 64);
      for (int i = 0; i < MR; ++i) {
        int32_t pair;
        std::memcpy(&pair, a[i] + p * 4, sizeof pair);
        const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
      }
    }
  }
  gemm_detail::finish_tile<simd::Avx512, MR, NV>(acc, nr_eff, ep);
}

template <int M>
struct Tile {
  static void run(const DirectArgs& d, int nr_eff, const gemm_detail::TileEpilogue& ep) {
    if (nr_eff <= simd::Avx512::kWidth)
      direct_bf16<M, 1>(d, nr_eff, ep);
    else
      direct_bf16<M, kNv>(d, nr_eff, ep);
  }
};

template <std::size_t... M>
constexpr std::array<DirectTileFn*, sizeof...(M)> make_tiles(std::index_sequence<M...>) {
  return {&Tile<static_cast<int>(M) + 1>::run...};
}
constexpr auto kTiles = make_tiles(std::make_index_sequence<kDirectMaxMr>{});

}  // namespace

const DirectKernel* direct_kernel_avx512bf16() {
  static constexpr DirectKernel kernel{kNr, DType::BF16, kTiles.data()};
  return &kernel;
}

}  // namespace mixprec::kernels::conv_detail
