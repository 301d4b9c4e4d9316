// Flash-style attention backward driver. Per (batch, head): K^T, V^T (for the score products)
// and K, Q, dO (for the gradient products) are packed once, delta = rowsum(dO * O) is taken,
// then for each block of kBr queries the visible keys are visited in blocks of kBc:
//   S = scale * Q_blk K_blk^T (+ mask), P = e^(S - lse)     recomputed, f32
//   dV_blk += P^T dO_blk                                      P^T transposed into memory
//   dP = dO_blk V_blk^T;  dS = P * (dP - delta)               f32, in place of dP
//   dQ_blk += scale dS K_blk;  dK_blk += scale dS^T Q_blk      dS^T transposed into memory
// dQ of a query block, dK and dV of the head accumulate in f32 scratch and are rounded once
// into the outputs. The A operand of every product has contiguous rows (AMX reads it in
// place); transposing the 16-bit P and dS costs less than packing strided views.
#include <algorithm>
#include <cmath>

#include "attention_internal.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/attention.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/transpose.h"

namespace mixprec::kernels {
namespace {

using attention_detail::matrix_at;
using attention_detail::mutable_matrix_at;

constexpr int64_t kBr = 64;   // queries per block: the K of the dV and dK products (AMX: 32 | kBr)
constexpr int64_t kBc = 128;  // keys per block: a multiple of the panel width 32

const IsaTable<attention_detail::RecomputeProbsFn> kRecomputeProbs{
    {attention_detail::recompute_probs_scalar, attention_detail::recompute_probs_avx2,
     attention_detail::recompute_probs_avx512, nullptr}};
const IsaTable<attention_detail::SoftmaxGradFn> kSoftmaxGrad{
    {attention_detail::softmax_grad_scalar, attention_detail::softmax_grad_avx2,
     attention_detail::softmax_grad_avx512, nullptr}};

// Per-thread buffers, reused across calls.
struct Scratch {
  Allocation s, dp, p, pt, ds, dst, dq, dk, dv, rows;
};
Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

struct Packs {
  PackedMatrix kt, vt, kp, qp, dop;
};
Packs& thread_packs() {
  thread_local Packs packs;
  return packs;
}

// Row r of matrix m (columns contiguous).
const char* row_at(const MatrixView& m, int64_t r) {
  return static_cast<const char*>(m.data) +
         static_cast<std::size_t>(r * m.row_stride) * dtype_size(m.dtype);
}
MatrixView rows_of(MatrixView m, int64_t r0, int64_t rows) {
  m.data = row_at(m, r0);
  m.rows = rows;
  return m;
}

// dst rows [r0, r0 + rows) = src (f32 [rows, dst.cols], contiguous), rounded once.
void store_rows(const float* src, const MutableMatrixView& dst, int64_t r0, int64_t rows) {
  convert_rows(src, DType::F32, dst.cols,
               static_cast<char*>(dst.data) +
                   static_cast<std::size_t>(r0 * dst.row_stride) * dtype_size(dst.dtype),
               dst.dtype, dst.row_stride, rows, dst.cols);
}

struct HeadGrad {
  MatrixView q, k, v, o, dout;  // [Sq, D], [Sk, D], [Sk, Dv], [Sq, Dv], [Sq, Dv]
  MutableMatrixView dq, dk, dv;
  const float* lse;  // [Sq]
  const char* mask;  // [Sq, Sk] rows mask_ld apart, or null
  DType mask_dtype;
  int64_t mask_ld;
  DType low;  // dtype of P and dS in the products
  float scale;
  bool causal;
};

void head_backward(const HeadGrad& g) {
  const int64_t sq = g.q.rows, sk = g.k.rows, d = g.q.cols, dv = g.v.cols;
  const std::size_t low_size = dtype_size(g.low);
  Scratch& sc = thread_scratch();
  float* s = static_cast<float*>(sc.s.reserve(kBr * kBc * sizeof(float)));    // [kBr, kBc]
  float* dp = static_cast<float*>(sc.dp.reserve(kBr * kBc * sizeof(float)));  // [kBr, kBc]
  // P and dS in the products' dtype [kBr, kBc] (f32: s and dp themselves) and transposed [kBc, kBr]
  char* p_low = g.low == DType::F32 ? reinterpret_cast<char*>(s)
                                    : static_cast<char*>(sc.p.reserve(kBr * kBc * low_size));
  char* ds_low = g.low == DType::F32 ? reinterpret_cast<char*>(dp)
                                     : static_cast<char*>(sc.ds.reserve(kBr * kBc * low_size));
  char* pt = static_cast<char*>(sc.pt.reserve(kBc * kBr * low_size));
  char* dst = static_cast<char*>(sc.dst.reserve(kBc * kBr * low_size));
  float* dq = static_cast<float*>(sc.dq.reserve(static_cast<std::size_t>(kBr * d) * 4));
  float* dk = static_cast<float*>(sc.dk.reserve(static_cast<std::size_t>(sk * d) * 4));
  float* dvv = static_cast<float*>(sc.dv.reserve(static_cast<std::size_t>(sk * dv) * 4));
  // delta [Sq], then dO and O of kBr rows widened to f32 [kBr, Dv]
  float* delta = static_cast<float*>(
      sc.rows.reserve(static_cast<std::size_t>(sq + 2 * kBr * dv) * sizeof(float)));
  float* do_f32 = delta + sq;
  float* o_f32 = do_f32 + kBr * dv;
  for (int64_t i0 = 0; i0 < sq; i0 += kBr) {
    const int64_t rows = std::min(kBr, sq - i0);
    convert_rows(row_at(g.dout, i0), g.dout.dtype, g.dout.row_stride, do_f32, DType::F32, dv, rows,
                 dv);
    convert_rows(row_at(g.o, i0), g.o.dtype, g.o.row_stride, o_f32, DType::F32, dv, rows, dv);
    for (int64_t r = 0; r < rows; ++r) {
      float sum = 0;
      for (int64_t j = 0; j < dv; ++j) sum += do_f32[r * dv + j] * o_f32[r * dv + j];
      delta[i0 + r] = sum;
    }
  }
  std::fill(dk, dk + sk * d, 0.0f);
  std::fill(dvv, dvv + sk * dv, 0.0f);

  // Packed into this thread's panels, kept across heads and calls (no allocation once warm).
  Packs& packs = thread_packs();
  const PackedMatrix& kt = packs.kt;
  const PackedMatrix& vt = packs.vt;
  const PackedMatrix& kp = packs.kp;
  const PackedMatrix& qp = packs.qp;
  const PackedMatrix& dop = packs.dop;
  repack_b(packs.kt, g.k.transposed(), g.q.dtype);     // [D, Sk]
  repack_b(packs.vt, g.v.transposed(), g.dout.dtype);  // [Dv, Sk]
  repack_b(packs.kp, g.k, g.low);                      // [Sk, D]
  repack_b(packs.qp, g.q, g.low);                      // [Sq, D]
  repack_b(packs.dop, g.dout, g.low);                  // [Sq, Dv]
  attention_detail::RecomputeProbsFn* probs = kRecomputeProbs();
  attention_detail::SoftmaxGradFn* softmax_grad = kSoftmaxGrad();
  GemmEpilogue accumulate;
  accumulate.beta = 1.0f;
  GemmEpilogue scaled_accumulate = accumulate;
  scaled_accumulate.alpha = g.scale;

  for (int64_t q0 = 0; q0 < sq; q0 += kBr) {
    const int64_t rows = std::min(kBr, sq - q0);
    // Causal: keys past the block's last query are hidden; round up to even for the packed
    // row ranges (the extra key is hidden from every query of the block, so P and dS are 0).
    const int64_t k_end = g.causal ? std::min(sk, (q0 + rows + 1) / 2 * 2) : sk;
    const MatrixView q_blk = rows_of(g.q, q0, rows), do_blk = rows_of(g.dout, q0, rows);
    std::fill(dq, dq + rows * d, 0.0f);
    for (int64_t k0 = 0; k0 < k_end; k0 += kBc) {
      const int64_t cols = std::min(kBc, k_end - k0);
      const GemmEpilogue score_ep =
          attention_detail::score_epilogue(g.scale, g.mask, g.mask_dtype, g.mask_ld, q0, k0);
      gemm_prepacked(q_blk, kt, MutableMatrixView::row_major(s, DType::F32, rows, cols, kBc),
                     score_ep, {0, -1, k0, k0 + cols});
      const int64_t diagonal = g.causal ? q0 - k0 + 1 : attention_detail::kAllVisible;
      probs(s, kBc, static_cast<int>(rows), static_cast<int>(cols), diagonal, g.lse + q0, p_low,
            g.low, kBc);
      transpose_2d(p_low, rows, cols, kBc, pt, kBr, low_size);
      gemm_prepacked(MatrixView::row_major(pt, g.low, cols, rows, kBr), dop,
                     MutableMatrixView::row_major(dvv + k0 * dv, DType::F32, cols, dv, dv),
                     accumulate, {q0, q0 + rows, 0, -1});
      gemm_prepacked(do_blk, vt, MutableMatrixView::row_major(dp, DType::F32, rows, cols, kBc), {},
                     {0, -1, k0, k0 + cols});
      softmax_grad(s, kBc, dp, kBc, static_cast<int>(rows), static_cast<int>(cols), delta + q0,
                   ds_low, g.low, kBc);
      transpose_2d(ds_low, rows, cols, kBc, dst, kBr, low_size);
      gemm_prepacked(MatrixView::row_major(ds_low, g.low, rows, cols, kBc), kp,
                     MutableMatrixView::row_major(dq, DType::F32, rows, d, d), scaled_accumulate,
                     {k0, k0 + cols, 0, -1});
      gemm_prepacked(MatrixView::row_major(dst, g.low, cols, rows, kBr), qp,
                     MutableMatrixView::row_major(dk + k0 * d, DType::F32, cols, d, d),
                     scaled_accumulate, {q0, q0 + rows, 0, -1});
    }
    store_rows(dq, g.dq, q0, rows);
  }
  store_rows(dk, g.dk, 0, sk);
  store_rows(dvv, g.dv, 0, sk);
}

void check_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& grad_out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                    const Tensor& dv) {
  const char* op = "[scaled_dot_product_attention_backward]";
  MIXPREC_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, " expected 4-D q, k, v, got ",
                shape_to_string(q.shape()), ", ", shape_to_string(k.shape()), ", ",
                shape_to_string(v.shape()));
  const Shape out_shape{q.size(0), q.size(1), q.size(2), v.size(3)};
  MIXPREC_CHECK(out.shape() == out_shape && grad_out.shape() == out_shape, op, " out ",
                shape_to_string(out.shape()), " and grad_out ", shape_to_string(grad_out.shape()),
                " must be ", shape_to_string(out_shape));
  MIXPREC_CHECK(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(), op,
                " dq, dk, dv must have the shapes of q, k, v");
  MIXPREC_CHECK(
      lse.dtype() == DType::F32 && lse.shape() == Shape({q.size(0), q.size(1), q.size(2)}), op,
      " logsumexp must be f32 [B, H, Sq], got ", dtype_name(lse.dtype()), " ",
      shape_to_string(lse.shape()));
  MIXPREC_CHECK(lse.stride(2) == 1 || lse.size(2) <= 1, op,
                " logsumexp's last dim must be contiguous");
  // f64 (gradient checks): q, k, v, out and the gradients f64, grad_out any float dtype.
  const bool f64 = q.dtype() == DType::F64;
  for (const Tensor* t : {&q, &k, &v, &out, &grad_out, &dq, &dk, &dv}) {
    const bool lane_float =
        t->dtype() == DType::F32 || t->dtype() == DType::BF16 || t->dtype() == DType::F16;
    MIXPREC_CHECK(f64 ? t->dtype() == DType::F64 || (t == &grad_out && lane_float) : lane_float, op,
                  " expected f32, bf16 or f16 tensors (or f64 throughout), got ",
                  dtype_name(t->dtype()));
    MIXPREC_CHECK(t->stride(3) == 1 || t->size(3) == 1, op, " last dims must be contiguous");
  }
}

}  // namespace

void scaled_dot_product_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, const Tensor& grad_out,
                                           const Tensor& logsumexp, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv,
                                           const AttentionOptions& opt) {
  check_backward(q, k, v, out, grad_out, logsumexp, dq, dk, dv);
  const int64_t batch = q.size(0), heads = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2);
  const float scale = opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(d));
  if (q.dtype() == DType::F64)
    return attention_detail::backward_f64(
        q, k, v, out, grad_out, logsumexp,
        opt.mask != nullptr ? opt.mask->expand({batch, heads, sq, sk}) : Tensor(), opt.causal,
        scale, dq, dk, dv);
  if (sq == 0 || sk == 0 || d == 0 || v.size(3) == 0 || batch * heads == 0) {
    for (const Tensor* t : {&dq, &dk, &dv}) t->zero_();  // no key (or no query) contributes
    return;
  }
  Tensor mask;
  if (opt.mask != nullptr) {
    mask = opt.mask->expand({batch, heads, sq, sk});
    if (mask.stride(3) != 1 && sk > 1) mask = mask.contiguous();
  }
  const bool all_bf16 = q.dtype() == DType::BF16 && k.dtype() == DType::BF16 &&
                        v.dtype() == DType::BF16 && grad_out.dtype() == DType::BF16;
  parallel_for(0, batch * heads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      HeadGrad g{matrix_at(q, b, h),
                 matrix_at(k, b, h),
                 matrix_at(v, b, h),
                 matrix_at(out, b, h),
                 matrix_at(grad_out, b, h),
                 mutable_matrix_at(dq, b, h),
                 mutable_matrix_at(dk, b, h),
                 mutable_matrix_at(dv, b, h),
                 logsumexp.data<float>() + b * logsumexp.stride(0) + h * logsumexp.stride(1),
                 nullptr,
                 DType::F32,
                 0,
                 all_bf16 ? DType::BF16 : DType::F32,
                 scale,
                 opt.causal};
      if (mask.defined()) {
        g.mask =
            static_cast<const char*>(mask.data_ptr()) +
            static_cast<std::size_t>(b * mask.stride(0) + h * mask.stride(1)) * mask.element_size();
        g.mask_dtype = mask.dtype();
        g.mask_ld = mask.stride(2);
      }
      head_backward(g);
    }
  });
}

}  // namespace mixprec::kernels
