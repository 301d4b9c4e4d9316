// The optimizer kernels at 16 f32 lanes (Avx512): the templates of optim_impl.h, with the
// random bits of stochastic rounding computed 16 lanes at a time (vpmulld).
#include "optim_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::optim_detail {
namespace {

struct RandomAvx512 {
  static __m512i lowbias(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846ca68bu)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }
  // Lane j: hash_bits(key0, key1, index + j).
  static __m512i hash(uint32_t key0, uint32_t key1, uint32_t index) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(index + key0)), lanes);
    return lowbias(_mm512_xor_si512(lowbias(x), _mm512_set1_epi32(static_cast<int>(key1))));
  }
  static __m512 unit(uint32_t key0, uint32_t key1, uint32_t index) {
    const __m512i top24 = _mm512_srli_epi32(hash(key0, key1, index), 8);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(top24), _mm512_set1_ps(0x1p-24f));
  }
  static __m512 round_bf16(__m512 x, uint32_t key0, uint32_t key1, uint32_t index) {
    const __m512i noise = _mm512_srli_epi32(hash(key0, key1, index), 16);
    const __m512i bits = _mm512_and_si512(_mm512_add_epi32(_mm512_castps_si512(x), noise),
                                          _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    return simd::Avx512::select_nan(x, x, _mm512_castsi512_ps(bits));
  }
};

}  // namespace

const OptimKernels& optim_avx512() { return optim_kernels<simd::Avx512, RandomAvx512>(); }

}  // namespace mixprec::kernels::optim_detail
