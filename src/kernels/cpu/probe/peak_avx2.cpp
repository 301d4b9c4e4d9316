#include <immintrin.h>

#include "peak_internal.h"

namespace mixprec::kernels::peak_detail {

// 12 independent accumulator chains: enough to cover FMA latency x issue width.
double fma_loop_avx2(int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  volatile float sink = _mm256_cvtss_f32(sum);  // keeps the loop alive
  (void)sink;
  return static_cast<double>(iterations) * 12 * 8 * 2;
}

}  // namespace mixprec::kernels::peak_detail
