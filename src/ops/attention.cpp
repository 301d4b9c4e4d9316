// SDPA front-ends (q, k, v apart, or packed in one [B, T, 3D] projection) and their flash-style
// backward (kernels::scaled_dot_product_attention_backward; for f64 models the same algorithm
// here, on f64 products). Per (batch, head), in blocks of kBr queries x kBc keys:
//   S = scale Q_b K_b^T + mask;  P = exp(S - lse)            (recomputed, never stored whole)
//   dV_b += P^T dO_q;  dP = dO_q V_b^T;  dS = P * (dP - rowsum(dO * O))
//   dQ_q += scale dS K_b;  dK_b += scale dS^T Q_q
#include "mixprec/ops/attention.h"

#include <cmath>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/attention.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/mode/grad_mode.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::GemmEpilogue;
using kernels::MatrixView;
using kernels::MutableMatrixView;

constexpr int64_t kBr = 64, kBc = 128;

struct SdpaBackward : autograd::Node {
  Tensor q, k, v, out, lse, mask;  // mask expanded to [B, H, Sq, Sk] or undefined
  bool causal = false;
  float scale = 1.0f;
  std::string_view name() const override { return "ScaledDotProductAttentionBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor dq = Tensor::empty(q.shape(), q.dtype()), dk = Tensor::empty(k.shape(), k.dtype()),
           dv = Tensor::empty(v.shape(), v.dtype());
    backward_into(grads[0], dq, dk, dv);
    return {dq, dk, dv};
  }

  // Writes every element of dq, dk, dv (q's, k's and v's shapes; any strides with the last dim
  // contiguous) from the output gradient `grad` [B, H, Sq, Dv].
  void backward_into(const Tensor& grad, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    if (q.dtype() == DType::F64) return run_f64(grad, dq, dk, dv);
    auto last_dim_contiguous = [](const Tensor& t) {
      return t.stride(3) == 1 || t.size(3) == 1 ? t : t.contiguous();
    };
    kernels::AttentionOptions opt;
    opt.causal = causal;
    opt.scale = scale;
    opt.mask = mask.defined() ? &mask : nullptr;
    kernels::scaled_dot_product_attention_backward(
        last_dim_contiguous(q), last_dim_contiguous(k), last_dim_contiguous(v),
        last_dim_contiguous(out), last_dim_contiguous(grad), lse.contiguous(), dq, dk, dv, opt);
  }

  // f64 (gradient checks): the same blocked algorithm on plain f64 products, accumulated in
  // place into dq, dk, dvv (zeroed first).
  void run_f64(const Tensor& grad, const Tensor& dq, const Tensor& dk, const Tensor& dvv) {
    using T = double;
    const DType acc = DType::F64;
    const int64_t B = q.size(0), H = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2),
                  dv = v.size(3);
    const Tensor qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(),
                 va = v.to(acc).contiguous();
    const Tensor oa = out.to(acc).contiguous(), ga = grad.to(acc).contiguous();
    const Tensor ma = mask.defined() ? mask.to(acc).contiguous() : Tensor();
    const Tensor lse_c = lse.contiguous();
    for (const Tensor* t : {&dq, &dk, &dvv}) t->zero_();
    // Head bh of a [B, H, S, X] gradient; its rows are stride(2) apart.
    auto head_of = [H](const Tensor& t, int64_t bh) {
      return t.data<T>() + (bh / H) * t.stride(0) + (bh % H) * t.stride(1);
    };
    const int64_t ldq = dq.stride(2), ldk = dk.stride(2), ldv = dvv.stride(2);
    parallel_for(0, B * H, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> s(kBr * kBc), dp(kBr * kBc), delta(static_cast<std::size_t>(sq));
      for (int64_t bh = lo; bh < hi; ++bh) {
        const T* Q = qa.data<T>() + bh * sq * d;
        const T* K = ka.data<T>() + bh * sk * d;
        const T* V = va.data<T>() + bh * sk * dv;
        const T* O = oa.data<T>() + bh * sq * dv;
        const T* dO = ga.data<T>() + bh * sq * dv;
        const T* M = ma.defined() ? ma.data<T>() + bh * sq * sk : nullptr;
        const float* L = lse_c.data<float>() + bh * sq;
        T* dQ = head_of(dq, bh);
        T* dK = head_of(dk, bh);
        T* dV = head_of(dvv, bh);
        for (int64_t i = 0; i < sq; ++i) {
          T sum = 0;
          for (int64_t j = 0; j < dv; ++j) sum += dO[i * dv + j] * O[i * dv + j];
          delta[static_cast<std::size_t>(i)] = sum;
        }
        for (int64_t q0 = 0; q0 < sq; q0 += kBr) {
          const int64_t rows = std::min(kBr, sq - q0);
          const int64_t k_end = causal ? std::min(sk, q0 + rows) : sk;
          for (int64_t k0 = 0; k0 < k_end; k0 += kBc) {
            const int64_t cols = std::min(kBc, k_end - k0);
            GemmEpilogue se;
            se.alpha = scale;
            kernels::gemm(MatrixView::row_major(Q + q0 * d, acc, rows, d, d),
                          MatrixView::row_major(K + k0 * d, acc, cols, d, d).transposed(),
                          MutableMatrixView::row_major(s.data(), acc, rows, cols, kBc), se);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c) {
                T& x = s[static_cast<std::size_t>(r * kBc + c)];
                if (M != nullptr) x += M[(q0 + r) * sk + k0 + c];
                const bool hidden = (causal && k0 + c > q0 + r) || std::isinf(L[q0 + r]);
                x = hidden ? T{0} : std::exp(x - static_cast<T>(L[q0 + r]));  // P
              }
            GemmEpilogue accumulate;
            accumulate.beta = 1.0f;
            // dV_b += P^T dO_q
            kernels::gemm(MatrixView::row_major(s.data(), acc, rows, cols, kBc).transposed(),
                          MatrixView::row_major(dO + q0 * dv, acc, rows, dv, dv),
                          MutableMatrixView::row_major(dV + k0 * ldv, acc, cols, dv, ldv),
                          accumulate);
            // dP = dO_q V_b^T, then dS = P * (dP - delta) in place of dP
            kernels::gemm(MatrixView::row_major(dO + q0 * dv, acc, rows, dv, dv),
                          MatrixView::row_major(V + k0 * dv, acc, cols, dv, dv).transposed(),
                          MutableMatrixView::row_major(dp.data(), acc, rows, cols, kBc));
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c) {
                const std::size_t at = static_cast<std::size_t>(r * kBc + c);
                dp[at] = s[at] * (dp[at] - delta[static_cast<std::size_t>(q0 + r)]);
              }
            GemmEpilogue scaled = accumulate;
            scaled.alpha = scale;
            // dQ_q += scale dS K_b;  dK_b += scale dS^T Q_q
            kernels::gemm(MatrixView::row_major(dp.data(), acc, rows, cols, kBc),
                          MatrixView::row_major(K + k0 * d, acc, cols, d, d),
                          MutableMatrixView::row_major(dQ + q0 * ldq, acc, rows, d, ldq), scaled);
            kernels::gemm(MatrixView::row_major(dp.data(), acc, rows, cols, kBc).transposed(),
                          MatrixView::row_major(Q + q0 * d, acc, rows, d, d),
                          MutableMatrixView::row_major(dK + k0 * ldk, acc, cols, d, ldk), scaled);
          }
        }
      }
    });
  }
  void release_saved() override { q = k = v = out = lse = mask = Tensor(); }
};

// [B, T, H * hd] (last dim contiguous) -> its [B, H, T, hd] view, no copy.
Tensor split_heads(const Tensor& t, int64_t heads) {
  return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).permute({0, 2, 1, 3});
}

// Part 0, 1 or 2 (q, k or v) of a packed [B, T, 3D] tensor as [B, H, T, hd] heads, no copy.
Tensor packed_heads(const Tensor& qkv, int64_t part, int64_t heads) {
  const int64_t d = qkv.size(2) / 3;
  return split_heads(qkv.slice(2, part * d, (part + 1) * d), heads);
}

// multi_head_attention_packed: q, k, v and out are the saved head views of qkv and y. The three
// head gradients are written straight into the slices of one d_qkv, every element of it, so it
// needs no zero fill and there is nothing to sum.
struct PackedAttentionBackward final : SdpaBackward {
  std::string_view name() const override { return "MultiHeadAttentionPackedBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
    const Tensor d_qkv = Tensor::empty({B, T, 3 * H * hd}, q.dtype());
    // reshape, not view: a gradient that cannot be viewed as heads (an expanded one, say) is
    // copied; backward_into takes any strides with the last dim contiguous.
    const Tensor grad = grads[0].reshape({B, T, H, hd}).permute({0, 2, 1, 3});
    backward_into(grad, packed_heads(d_qkv, 0, H), packed_heads(d_qkv, 1, H),
                  packed_heads(d_qkv, 2, H));
    return {d_qkv};
  }
};

// f64 forward (gradient checks): the definition, row by row, with the same masking rules.
void attention_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   bool causal, double scale, const Tensor& out, const Tensor& lse) {
  const int64_t B = q.size(0), H = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2),
                dv = v.size(3);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const Tensor mc = mask.defined() ? mask.to(DType::F64).contiguous() : Tensor();
  std::vector<double> p(static_cast<std::size_t>(sk));
  auto out_row = [&](int64_t bh, int64_t i) {  // out may be strided (heads of a [B, T, D] y)
    return out.data<double>() + (bh / H) * out.stride(0) + (bh % H) * out.stride(1) +
           i * out.stride(2);
  };
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < sq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < sk; ++j) {
        double s = 0;
        for (int64_t x = 0; x < d; ++x)
          s += qc.data<double>()[(bh * sq + i) * d + x] * kc.data<double>()[(bh * sk + j) * d + x];
        s *= scale;
        if (mc.defined()) s += mc.data<double>()[(bh * sq + i) * sk + j];
        if (causal && j > i) s = -INFINITY;
        p[static_cast<std::size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (double& x : p) sum += x = mx == -INFINITY ? 0.0 : std::exp(x - mx);
      for (int64_t y = 0; y < dv; ++y) {
        double acc = 0;
        for (int64_t j = 0; j < sk; ++j)
          acc += p[static_cast<std::size_t>(j)] * vc.data<double>()[(bh * sk + j) * dv + y];
        out_row(bh, i)[y] = sum > 0 ? acc / sum : 0.0;
      }
      lse.data<float>()[bh * sq + i] = sum > 0 ? static_cast<float>(mx + std::log(sum)) : -INFINITY;
    }
}

// The front-ends' common part: attention of q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv]
// (checked, same dtype when f64) into out [B, H, Sq, Dv] (any strides, last dim contiguous).
// With a `node` (the caller records it) it also saves what the backward needs.
void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const AttentionParams& params, SdpaBackward* node) {
  const int64_t B = q.size(0), H = q.size(1), sq = q.size(2), d = q.size(3);
  const float scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  // The f64 reference always writes the log-sum-exp; the kernel only when asked.
  Tensor lse =
      node != nullptr || q.dtype() == DType::F64 ? Tensor::empty({B, H, sq}, DType::F32) : Tensor();
  Tensor mask =
      params.mask.defined() ? params.mask.detach().expand({B, H, sq, k.size(2)}) : Tensor();
  {
    NoGrad no_grad;
    if (q.dtype() == DType::F64) {
      attention_f64(q, k, v, mask, params.causal, scale, out, lse);
    } else {
      kernels::AttentionOptions opt;
      opt.causal = params.causal;
      opt.scale = scale;
      opt.mask = mask.defined() ? &mask : nullptr;
      kernels::scaled_dot_product_attention(q, k, v, out, opt, lse.defined() ? &lse : nullptr);
    }
  }
  if (node != nullptr) {
    node->q = q.detach();
    node->k = k.detach();
    node->v = v.detach();
    node->out = out.detach();
    node->lse = lse;
    node->mask = mask;
    node->causal = params.causal;
    node->scale = scale;
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionParams& params) {
  const auto [q, k, v] =
      amp::autocast_args(amp::AutocastOp::ScaledDotProductAttention, q_in, k_in, v_in);
  for (const Tensor* t : {&q, &k, &v}) ops_detail::check_float("scaled_dot_product_attention", *t);
  MIXPREC_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                "[scaled_dot_product_attention] expected 4-D q, k, v, got ",
                shape_to_string(q.shape()), ", ", shape_to_string(k.shape()), ", ",
                shape_to_string(v.shape()));
  if (q.dtype() == DType::F64)
    MIXPREC_CHECK(k.dtype() == DType::F64 && v.dtype() == DType::F64,
                  "[scaled_dot_product_attention] f64 runs only when q, k and v are all f64");
  Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
  const auto node = autograd::needs_grad({&q, &k, &v}) ? std::make_shared<SdpaBackward>() : nullptr;
  run_attention(q, k, v, out, params, node.get());
  if (node) autograd::record(node, {&q, &k, &v}, {&out});
  return out;
}

Tensor multi_head_attention_packed(const Tensor& qkv_in, int64_t heads,
                                   const AttentionParams& params) {
  const auto [qkv_cast] = amp::autocast_args(amp::AutocastOp::ScaledDotProductAttention, qkv_in);
  ops_detail::check_float("multi_head_attention_packed", qkv_cast);
  MIXPREC_CHECK(heads >= 1, "[multi_head_attention_packed] heads must be >= 1, got ", heads);
  MIXPREC_CHECK(qkv_cast.dim() == 3 && qkv_cast.size(2) % (3 * heads) == 0,
                "[multi_head_attention_packed] expected qkv [B, T, 3 * D] with D a multiple of ",
                heads, " heads, got ", shape_to_string(qkv_cast.shape()));
  // The heads are views of qkv: they need its last dim contiguous.
  const Tensor qkv = qkv_cast.stride(2) == 1 ? qkv_cast : qkv_cast.contiguous();
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  Tensor y = Tensor::empty({B, T, D}, qkv.dtype());
  const Tensor x = qkv.detach();
  const auto node =
      autograd::needs_grad({&qkv}) ? std::make_shared<PackedAttentionBackward>() : nullptr;
  run_attention(packed_heads(x, 0, heads), packed_heads(x, 1, heads), packed_heads(x, 2, heads),
                split_heads(y, heads), params, node.get());
  if (node) autograd::record(node, {&qkv}, {&y});
  return y;
}

}  // namespace mixprec
