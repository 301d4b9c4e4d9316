// The optimizer kernels at 8 f32 lanes (Avx2): the templates of optim_impl.h, with the random
// bits of stochastic rounding computed 8 lanes at a time.
#include "optim_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::optim_detail {
namespace {

struct RandomAvx2 {
  static __m256i lowbias(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }
  // Lane j: hash_bits(key0, key1, index + j).
  static __m256i hash(uint32_t key0, uint32_t key1, uint32_t index) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(index + key0)), lanes);
    return lowbias(_mm256_xor_si256(lowbias(x), _mm256_set1_epi32(static_cast<int>(key1))));
  }
  static __m256 unit(uint32_t key0, uint32_t key1, uint32_t index) {
    const __m256i top24 = _mm256_srli_epi32(hash(key0, key1, index), 8);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(top24), _mm256_set1_ps(0x1p-24f));
  }
  static __m256 round_bf16(__m256 x, uint32_t key0, uint32_t key1, uint32_t index) {
    const __m256i noise = _mm256_srli_epi32(hash(key0, key1, index), 16);
    const __m256i bits = _mm256_and_si256(_mm256_add_epi32(_mm256_castps_si256(x), noise),
                                          _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    return simd::Avx2::select_nan(x, x, _mm256_castsi256_ps(bits));
  }
};

}  // namespace

const OptimKernels& optim_avx2() { return optim_kernels<simd::Avx2, RandomAvx2>(); }

}  // namespace mixprec::kernels::optim_detail
