// The optimizer kernels at 16 f32 lanes (Avx512): the templates of optim_impl.h.
#include <bit>

#include "optim_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::optim_detail {

double square_sum_avx512(const void* data, DType dtype, int64_t n) {
  static_assert(kSquareSumLanes == 8, "one __m512d of accumulators");
  // The eight f32 values at p widened to f64 (f16 and bf16 through f32: both exact).
  auto load8 = [dtype](const char* p) {
    __m256 f;
    switch (dtype) {
      case DType::F16:
        f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        break;
      case DType::BF16:
        f = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
        break;
      default:
        f = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
        break;
    }
    return _mm512_cvtps_pd(f);
  };
  const auto* bytes = static_cast<const char*>(data);
  const std::size_t elem = dtype_size(dtype);
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + kSquareSumLanes <= n; i += kSquareSumLanes) {
    const __m512d a = load8(bytes + i * elem);
    acc = _mm512_add_pd(acc, _mm512_mul_pd(a, a));  // the square is exact: no fma needed
  }
  alignas(64) double lanes[kSquareSumLanes];
  _mm512_store_pd(lanes, acc);
  for (; i < n; ++i) {  // the tail joins accumulator 0, as in the scalar loop
    double a;
    switch (dtype) {
      case DType::F16:
        a = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
            *reinterpret_cast<const uint16_t*>(bytes + i * elem))));
        break;
      case DType::BF16: {
        const uint32_t high = uint32_t{*reinterpret_cast<const uint16_t*>(bytes + i * elem)} << 16;
        a = std::bit_cast<float>(high);
        break;
      }
      default:
        a = *reinterpret_cast<const float*>(bytes + i * elem);
        break;
    }
    lanes[0] += a * a;
  }
  double total = 0.0;
  for (double v : lanes) total += v;
  return total;
}

const OptimKernels& optim_avx512() {
  return optim_kernels<simd::Avx512, HashRandom<simd::Avx512>>();
}

}  // namespace mixprec::kernels::optim_detail
