#include <immintrin.h>

#include "../simd/amx_tile.h"
#include "peak_internal.h"

namespace mixprec::kernels::peak_detail {

// One tdpbf16ps on 16 x 16 f32 tiles with K = 32: 16 * 16 * 32 * 2 = 16384 flops. Four
// independent accumulator tiles; the operand tiles hold whatever tilezero left (zeros).
double tile_loop_amx(int64_t iterations) {
  gemm_detail::amx_configure_16x64();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sink[256];
  _tile_stored(0, sink, 64);
  _tile_release();
  volatile float keep = sink[0];
  (void)keep;
  return static_cast<double>(iterations) * 4 * 16384;
}

}  // namespace mixprec::kernels::peak_detail
