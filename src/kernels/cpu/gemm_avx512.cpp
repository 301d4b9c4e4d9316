// AVX-512 GEMM micro-kernel: 14 x 32 f32 tile, 28 of the 32 zmm registers accumulate, two
// hold the B row and one the broadcast of A.
#include "gemm_tile.h"
#include "simd_avx512.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kMr = 14;
constexpr int kNv = 2;
template <int M>
struct Tile {
  static void run(int64_t k, const void* a, const void* b, int nr_eff, const TileEpilogue& ep) {
    tile_f32<simd::Avx512, M, kNv, kMr>(k, a, b, nr_eff, ep);
  }
};
constexpr auto kTiles = tile_table<Tile>(std::make_index_sequence<kMr>{});

}  // namespace

const Ukernel& ukernel_avx512() {
  static constexpr Ukernel kernel{kMr, kNv * simd::Avx512::kWidth, DType::F32, kTiles.data(), pack_b_f32<simd::Avx512, kNv * simd::Avx512::kWidth>,
                                       pack_a_f32<simd::Avx512, kMr>};
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
