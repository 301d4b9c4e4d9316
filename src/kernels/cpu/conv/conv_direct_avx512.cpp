// Direct convolution tile for AVX-512 f32 (conv_direct.h): MR pixels x 32 output channels,
// one broadcast FMA per channel read in place from the NHWC f32 input. A tile with at most 16
// columns left runs only the panel's first vector (every column's sums the same).
#include "conv_direct.h"
#include "../gemm/gemm_tile.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

constexpr int kNv = 2;
constexpr int kNr = kNv * simd::Avx512::kWidth;

// NV: the panel's vectors computed (the panel is kNv wide either way).
template <int MR, int NV>
void direct_f32(const DirectArgs& d, int nr_eff, const gemm_detail::TileEpilogue& ep) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int t = 0; t < d.taps; ++t) {
    const float* a[MR];  // pixel i's channels under this tap
    for (int i = 0; i < MR; ++i) a[i] = static_cast<const float*>(d.a_rows[t * kDirectMaxMr + i]);
    const float* b = reinterpret_cast<const float*>(static_cast<const char*>(d.b_panel) +
                                                    d.tap_index[t] * d.b_tap_bytes);
    for (int64_t c = 0; c < d.cg; ++c) {
      __m512 bv[NV];  // [32 columns]: the weights of channel c
      for (int j = 0; j < NV; ++j) bv[j] = _mm512_loadu_ps(b + c * kNr + j * 16);
      for (int i = 0; i < MR; ++i) {
        const __m512 av = _mm512_set1_ps(a[i][c]);
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
      }
    }
  }
  gemm_detail::finish_tile<simd::Avx512, MR, NV>(acc, nr_eff, ep);
}

template <int M>
struct Tile {
  static void run(const DirectArgs& d, int nr_eff, const gemm_detail::TileEpilogue& ep) {
    if (nr_eff <= simd::Avx512::kWidth)
      direct_f32<M, 1>(d, nr_eff, ep);
    else
      direct_f32<M, kNv>(d, nr_eff, ep);
  }
};

template <std::size_t... M>
constexpr std::array<DirectTileFn*, sizeof...(M)> make_tiles(std::index_sequence<M...>) {
  return {&Tile<static_cast<int>(M) + 1>::run...};
}
constexpr auto kTiles = make_tiles(std::make_index_sequence<kDirectMaxMr>{});

}  // namespace

const DirectKernel* direct_kernel_avx512() {
  static constexpr DirectKernel kernel{kNr, DType::F32, kTiles.data()};
  return &kernel;
}

}  // namespace mixprec::kernels::conv_detail
