#include "attention_block.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::attention_detail {

void block_update_avx2(float* s, int64_t ld_s, int rows, int cols, float* m, float* l, void* p,
                       DType p_dtype, int64_t ld_p, float* o, int64_t ld_o, int dv) {
  block_update<simd::Avx2>(s, ld_s, rows, cols, m, l, p, p_dtype, ld_p, o, ld_o, dv);
}

void recompute_probs_avx2(float* s, int64_t ld_s, int rows, int cols, const float* lse) {
  recompute_probs<simd::Avx2>(s, ld_s, rows, cols, lse);
}

void softmax_grad_avx2(const float* p, int64_t ld_p, float* dp, int64_t ld_dp, int rows, int cols,
                       const float* delta) {
  softmax_grad<simd::Avx2>(p, ld_p, dp, ld_dp, rows, cols, delta);
}

}  // namespace mixprec::kernels::attention_detail
