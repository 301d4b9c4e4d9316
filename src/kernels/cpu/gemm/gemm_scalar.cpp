// The scalar-level GEMM micro-kernel: the same template as the SIMD levels at width 1.
#include "gemm_tile.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kMr = 4;
constexpr int kNr = 8;
template <int M>
struct Tile {
  static void run(int64_t k, const void* a, const void* b, int nr_eff, const TileEpilogue& ep) {
    tile_f32<simd::Scalar, M, kNr, kMr>(k, a, b, nr_eff, ep);
  }
};
constexpr auto kTiles = tile_table<Tile>(std::make_index_sequence<kMr>{});

}  // namespace

const Ukernel& ukernel_scalar() {
  static constexpr Ukernel kernel{kMr,
                                  kNr,
                                  DType::F32,
                                  kTiles.data(),
                                  pack_b_f32<simd::Scalar, kNr>,
                                  pack_a_f32<simd::Scalar, kMr>};
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
