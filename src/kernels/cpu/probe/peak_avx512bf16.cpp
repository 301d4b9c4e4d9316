#include "../simd/simd_avx512.h"
#include "peak_internal.h"
#include "peak_loop.h"

namespace mixprec::kernels::peak_detail {

// One vdpbf16ps: 16 lanes x 2 products x (multiply + add) = 64 flops.
double dot_loop_avx512bf16(int64_t iterations) {
  using S = simd::Avx512;
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80),
                 y = (__m512bh)_mm512_set1_epi32(0x33D633D6);
  run_chains<S, 16>(iterations, [&](S::F acc) { return _mm512_dpbf16_ps(acc, x, y); });
  return static_cast<double>(iterations) * 16 * 64;
}

}  // namespace mixprec::kernels::peak_detail
