#include <immintrin.h>

#include "peak_internal.h"

namespace mixprec::kernels::peak_detail {

// One vdpbf16ps: 16 lanes x 2 products x (multiply + add) = 64 flops.
double dot_loop_avx512bf16(int64_t iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80),
                 y = (__m512bh)_mm512_set1_epi32(0x33D633D6);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < 16; ++i) sum = _mm512_add_ps(sum, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return static_cast<double>(iterations) * 16 * 64;
}

}  // namespace mixprec::kernels::peak_detail
