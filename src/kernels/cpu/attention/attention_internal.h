#pragma once
// The per-ISA piece of attention: the online-softmax update of one block of scores.
#include <cstdint>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dtype.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels::attention_detail {

// The epilogue of a block's score GEMM S = Q K^T: scaled by `scale`, plus the additive mask's
// block at (q0, k0) when there is one (mask rows mask_ld elements apart).
inline GemmEpilogue score_epilogue(float scale, const char* mask, DType mask_dtype,
                                   int64_t mask_ld, int64_t q0, int64_t k0) {
  GemmEpilogue ep;
  ep.alpha = scale;
  if (mask != nullptr) {
    ep.residual = mask + static_cast<std::size_t>(q0 * mask_ld + k0) * dtype_size(mask_dtype);
    ep.residual_dtype = mask_dtype;
    ep.residual_ld = mask_ld;
  }
  return ep;
}

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

// Backward, on one block of f32 scores s (scaled, masked; -inf where hidden):
//   s[r * ld_s + j] = e^(s - lse[r])    the forward's probabilities, in place (0 when hidden or
//                                       when the row saw no key, lse[r] = -inf)
//   dp[r * ld_dp + j] = s * (dp - delta[r])   then, with s holding those probabilities, the
//                                       score gradient dS in place of dP = dO V^T
using RecomputeProbsFn = void(float* s, int64_t ld_s, int rows, int cols, const float* lse);
using SoftmaxGradFn = void(const float* p, int64_t ld_p, float* dp, int64_t ld_dp, int rows,
                           int cols, const float* delta);

void recompute_probs_scalar(float*, int64_t, int, int, const float*);
void recompute_probs_avx2(float*, int64_t, int, int, const float*);
void recompute_probs_avx512(float*, int64_t, int, int, const float*);
void softmax_grad_scalar(const float*, int64_t, float*, int64_t, int, int, const float*);
void softmax_grad_avx2(const float*, int64_t, float*, int64_t, int, int, const float*);
void softmax_grad_avx512(const float*, int64_t, float*, int64_t, int, int, const float*);

// f64 (gradient checks), attention_f64.cpp: the forward from the definition (mask expanded to
// [B, H, Sq, Sk] or undefined; the log-sum-exp into `lse` when given) and the flash-style
// backward on f64 products (dq, dk, dv f64, any strides with the last dim contiguous).
void forward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 bool causal, double scale, const Tensor& out, const Tensor* lse);
void backward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& grad, const Tensor& lse, const Tensor& mask, bool causal,
                  float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

// The [rows, cols] matrix of a 4-D tensor at (b, h): its dims 2 and 3.
inline MatrixView matrix_at(const Tensor& t, int64_t b, int64_t h) {
  const char* base = static_cast<const char*>(t.data_ptr()) +
                     static_cast<std::size_t>(b * t.stride(0) + h * t.stride(1)) * t.element_size();
  return {base, t.dtype(), t.size(2), t.size(3), t.stride(2), t.stride(3)};
}

}  // namespace mixprec::kernels::attention_detail
