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
inline GemmEpilogue score_epilogue(float scale, const char* mask, DType mask_dtype, int64_t mask_ld,
                                   int64_t q0, int64_t k0) {
  GemmEpilogue ep;
  ep.alpha = scale;
  if (mask != nullptr) {
    ep.residual = mask + static_cast<std::size_t>(q0 * mask_ld + k0) * dtype_size(mask_dtype);
    ep.residual_dtype = mask_dtype;
    ep.residual_ld = mask_ld;
  }
  return ep;
}

// Which scores of a block a query sees. Row r of a block sees its first
// visible_columns(diagonal, r, cols) columns: a causal block at (q0, k0) has diagonal
// q0 - k0 + 1 (key k0 + j is visible to query q0 + r when j < diagonal + r), any other block
// kAllVisible. The steps below never read a hidden score (the score GEMM computes whole
// rectangles; what lies past the diagonal is garbage) and give it probability 0, so the
// causal mask costs no pass over the scores and no exponentials.
constexpr int64_t kAllVisible = int64_t{1} << 40;
inline int visible_columns(int64_t diagonal, int r, int cols) {
  const int64_t n = diagonal + r;
  return n <= 0 ? 0 : n >= cols ? cols : static_cast<int>(n);
}

// For each of `rows` query rows, with scores s[r * ld_s + j], j < cols (f32, scaled, masked):
//   m_new = max(m[r], max_j s);  alpha = e^(m[r] - m_new)
//   p[r * ld_p + j] = round_to(p_dtype, e^(s - m_new))         (0 when hidden or m_new is -inf)
//   l[r] = alpha * l[r] + sum_j p (the rounded values);  o[r, :dv] *= alpha;  m[r] = m_new
using BlockUpdateFn = void(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal, float* m,
                           float* l, void* p, DType p_dtype, int64_t ld_p, float* o, int64_t ld_o,
                           int dv);

void block_update_scalar(float*, int64_t, int, int, int64_t, float*, float*, void*, DType, int64_t,
                         float*, int64_t, int);
void block_update_avx2(float*, int64_t, int, int, int64_t, float*, float*, void*, DType, int64_t,
                       float*, int64_t, int);
void block_update_avx512(float*, int64_t, int, int, int64_t, float*, float*, void*, DType, int64_t,
                         float*, int64_t, int);

// A few queries attending over keys read in place, no packing: a decoding step's one query
// would pay more for packing K and V than for its products. For each query row r of q (keys
// [0, visible_columns(diagonal, r, k.rows)) visible):
//   s_j = scale * (q_r . k_j) + mask_r[j];  p_j = e^(s_j - max_j s);  out_r = sum_j p_j v_j / sum_j
//   p_j
// in f32 (p unrounded), out rounded once; lse_r = max + log(sum p) when lse is given. A row
// that sees no key gets zeros (lse -inf). q [rows, d], k [keys, d], v [keys, dv] and out
// [rows, dv] have contiguous rows; d, dv <= kAttendRowsMaxDim; `scores` holds k.rows floats.
constexpr int kAttendRowsMaxDim = 256;
struct AttendRows {
  MatrixView q, k, v;
  MutableMatrixView out;
  float scale;
  int64_t diagonal;
  const char* mask;  // [rows, keys] mask_ld apart, or null
  DType mask_dtype;
  int64_t mask_ld;
  float* lse;  // rows lse_stride apart, or null
  int64_t lse_stride;
  float* scores;
};
using AttendRowsFn = void(const AttendRows&);
void attend_rows_scalar(const AttendRows&);
void attend_rows_avx2(const AttendRows&);
void attend_rows_avx512(const AttendRows&);

// Backward, on one block of f32 scores s (scaled, masked; -inf where masked):
//   s[r * ld_s + j] = e^(s - lse[r])    the forward's probabilities P, in place (0 when hidden,
//                                       masked, or when the row saw no key, lse[r] = -inf), and
//                                       P rounded to `low` into p_low (unless low is f32)
//   ds[r * ld_ds + j] = round_to(ds_dtype, p * (dp - delta[r]))   the score gradient dS from
//                                       P (f32) and dP = dO V^T; ds may be dp itself (f32)
using RecomputeProbsFn = void(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal,
                              const float* lse, void* p_low, DType low, int64_t ld_low);
using SoftmaxGradFn = void(const float* p, int64_t ld_p, const float* dp, int64_t ld_dp, int rows,
                           int cols, const float* delta, void* ds, DType ds_dtype, int64_t ld_ds);

void recompute_probs_scalar(float*, int64_t, int, int, int64_t, const float*, void*, DType,
                            int64_t);
void recompute_probs_avx2(float*, int64_t, int, int, int64_t, const float*, void*, DType, int64_t);
void recompute_probs_avx512(float*, int64_t, int, int, int64_t, const float*, void*, DType,
                            int64_t);
void softmax_grad_scalar(const float*, int64_t, const float*, int64_t, int, int, const float*,
                         void*, DType, int64_t);
void softmax_grad_avx2(const float*, int64_t, const float*, int64_t, int, int, const float*, void*,
                       DType, int64_t);
void softmax_grad_avx512(const float*, int64_t, const float*, int64_t, int, int, const float*,
                         void*, DType, int64_t);

// f64 (gradient checks), attention_f64.cpp: the forward from the definition (mask expanded to
// [B, H, Sq, Sk] or undefined; the log-sum-exp into `lse` when given) and the flash-style
// backward on f64 products (dq, dk, dv f64, any strides with the last dim contiguous).
void forward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                 double scale, const Tensor& out, const Tensor* lse);
void backward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& grad, const Tensor& lse, const Tensor& mask, bool causal,
                  float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv);

// The [rows, cols] matrix of a 4-D tensor at (b, h): its dims 2 and 3.
inline MatrixView matrix_at(const Tensor& t, int64_t b, int64_t h) {
  const char* base = static_cast<const char*>(t.data_ptr()) +
                     static_cast<std::size_t>(b * t.stride(0) + h * t.stride(1)) * t.element_size();
  return {base, t.dtype(), t.size(2), t.size(3), t.stride(2), t.stride(3)};
}
// The (b, h) matrices of a 4-D tensor, its sizes and strides read once: a kernel visiting every
// head calls at(b, h), which only moves the start (matrix_at asks the tensor anew each time).
struct HeadMatrices {
  explicit HeadMatrices(const Tensor& t)
      : first(matrix_at(t, 0, 0)),
        b_bytes(t.stride(0) * static_cast<int64_t>(t.element_size())),
        h_bytes(t.stride(1) * static_cast<int64_t>(t.element_size())) {}
  MatrixView at(int64_t b, int64_t h) const {
    MatrixView m = first;
    m.data = static_cast<const char*>(first.data) + b * b_bytes + h * h_bytes;
    return m;
  }
  MutableMatrixView mutable_at(int64_t b, int64_t h) const {
    const MatrixView m = at(b, h);
    return {const_cast<void*>(m.data), m.dtype, m.rows, m.cols, m.row_stride};
  }
  MatrixView first;
  int64_t b_bytes, h_bytes;
};
// The same to write into (columns contiguous).
inline MutableMatrixView mutable_matrix_at(const Tensor& t, int64_t b, int64_t h) {
  char* base = static_cast<char*>(t.data_ptr()) +
               static_cast<std::size_t>(b * t.stride(0) + h * t.stride(1)) * t.element_size();
  return {base, t.dtype(), t.size(2), t.size(3), t.stride(2)};
}

}  // namespace mixprec::kernels::attention_detail
