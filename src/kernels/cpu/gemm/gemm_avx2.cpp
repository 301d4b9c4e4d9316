// AVX2 + FMA GEMM micro-kernel: 6 x 16 f32 tile, 12 of the 16 ymm registers accumulate.
#include "gemm_tile.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kMr = 6;
constexpr int kNv = 2;
template <int M>
struct Tile {
  static void run(int64_t k, const void* a, const void* b, int nr_eff, const TileEpilogue& ep) {
    tile_f32<simd::Avx2, M, kNv, kMr>(k, a, b, nr_eff, ep);
  }
};
constexpr auto kTiles = tile_table<Tile>(std::make_index_sequence<kMr>{});

}  // namespace

const Ukernel& ukernel_avx2() {
  static constexpr Ukernel kernel{kMr,
                                  kNv * simd::Avx2::kWidth,
                                  DType::F32,
                                  kTiles.data(),
                                  pack_b_f32<simd::Avx2, kNv * simd::Avx2::kWidth>,
                                  pack_a_f32<simd::Avx2, kMr>};
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
