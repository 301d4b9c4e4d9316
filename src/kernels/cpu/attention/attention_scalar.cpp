#include "attention_block.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::attention_detail {

void block_update_scalar(float* s, int64_t ld_s, int rows, int cols, float* m, float* l, void* p,
                         DType p_dtype, int64_t ld_p, float* o, int64_t ld_o, int dv) {
  block_update<simd::Scalar>(s, ld_s, rows, cols, m, l, p, p_dtype, ld_p, o, ld_o, dv);
}

void recompute_probs_scalar(float* s, int64_t ld_s, int rows, int cols, const float* lse) {
  recompute_probs<simd::Scalar>(s, ld_s, rows, cols, lse);
}

void softmax_grad_scalar(const float* p, int64_t ld_p, float* dp, int64_t ld_dp, int rows, int cols,
                         const float* delta) {
  softmax_grad<simd::Scalar>(p, ld_p, dp, ld_dp, rows, cols, delta);
}

}  // namespace mixprec::kernels::attention_detail
