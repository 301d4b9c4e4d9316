#pragma once
// The per-ISA piece of attention: the online-softmax update of one block of scores.
#include <cstdint>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dtype.h"

namespace mixprec::kernels::attention_detail {

// For each of `rows` query rows, with scores s[r * ld_s + j], j < cols (f32, scaled, masked):
//   m_new = max(m[r], max_j s);  alpha = e^(m[r] - m_new)
//   p[r * ld_p + j] = round_to(p_dtype, e^(s - m_new))         (0 when m_new is -inf)
//   l[r] = alpha * l[r] + sum_j p (the rounded values);  o[r, :dv] *= alpha;  m[r] = m_new
using BlockUpdateFn = void(float* s, int64_t ld_s, int rows, int cols, float* m, float* l, void* p,
                           DType p_dtype, int64_t ld_p, float* o, int64_t ld_o, int dv);

void block_update_scalar(float*, int64_t, int, int, float*, float*, void*, DType, int64_t, float*,
                         int64_t, int);
void block_update_avx2(float*, int64_t, int, int, float*, float*, void*, DType, int64_t, float*,
                       int64_t, int);
void block_update_avx512(float*, int64_t, int, int, float*, float*, void*, DType, int64_t, float*,
                         int64_t, int);

}  // namespace mixprec::kernels::attention_detail
