// f64 attention (gradient checks): the forward from the definition, row by row, and the
// flash-style backward on plain f64 products, with the masking rules of the f32-lane kernels.
// Per (batch, head), in blocks of kBr queries x kBc keys:
//   S = scale Q_b K_b^T + mask;  P = exp(S - lse)            (recomputed, never stored whole)
//   dV_b += P^T dO_q;  dP = dO_q V_b^T;  dS = P * (dP - rowsum(dO * O))
//   dQ_q += scale dS K_b;  dK_b += scale dS^T Q_q
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention_internal.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels::attention_detail {
namespace {

constexpr int64_t kBr = 64, kBc = 128;

// Head bh of a [B, H, S, X] tensor with `heads` heads; its rows are stride(2) apart.
double* head_of(const Tensor& t, int64_t heads, int64_t bh) {
  return t.data<double>() + (bh / heads) * t.stride(0) + (bh % heads) * t.stride(1);
}

}  // namespace

void forward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 bool causal, double scale, const Tensor& out, const Tensor* lse) {
  const int64_t B = q.size(0), H = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2),
                dv = v.size(3);
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const Tensor mc = mask.defined() ? mask.to(DType::F64).contiguous() : Tensor();
  std::vector<double> p(static_cast<std::size_t>(sk));
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
      double* out_row = head_of(out, H, bh) + i * out.stride(2);  // out may be strided
      for (int64_t y = 0; y < dv; ++y) {
        double acc = 0;
        for (int64_t j = 0; j < sk; ++j)
          acc += p[static_cast<std::size_t>(j)] * vc.data<double>()[(bh * sk + j) * dv + y];
        out_row[y] = sum > 0 ? acc / sum : 0.0;
      }
      if (lse != nullptr)
        lse->data<float>()[(bh / H) * lse->stride(0) + (bh % H) * lse->stride(1) +
                           i * lse->stride(2)] =
            sum > 0 ? static_cast<float>(mx + std::log(sum)) : -INFINITY;
    }
}

void backward_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& grad, const Tensor& lse, const Tensor& mask, bool causal,
                  float scale, const Tensor& dq, const Tensor& dk, const Tensor& dvv) {
  using T = double;
  const DType acc = DType::F64;
  const int64_t H = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2), dv = v.size(3);
  const Tensor qa = q.to(acc).contiguous(), ka = k.to(acc).contiguous(),
               va = v.to(acc).contiguous();
  const Tensor oa = out.to(acc).contiguous(), ga = grad.to(acc).contiguous();
  const Tensor ma = mask.defined() ? mask.to(acc).contiguous() : Tensor();
  const Tensor lse_c = lse.contiguous();
  for (const Tensor* t : {&dq, &dk, &dvv}) t->zero_();
  const int64_t ldq = dq.stride(2), ldk = dk.stride(2), ldv = dvv.stride(2);
  parallel_for(0, q.size(0) * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> s(kBr * kBc), dp(kBr * kBc), delta(static_cast<std::size_t>(sq));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const T* Q = qa.data<T>() + bh * sq * d;
      const T* K = ka.data<T>() + bh * sk * d;
      const T* V = va.data<T>() + bh * sk * dv;
      const T* O = oa.data<T>() + bh * sq * dv;
      const T* dO = ga.data<T>() + bh * sq * dv;
      const T* M = ma.defined() ? ma.data<T>() + bh * sq * sk : nullptr;
      const float* L = lse_c.data<float>() + bh * sq;
      T* dQ = head_of(dq, H, bh);
      T* dK = head_of(dk, H, bh);
      T* dV = head_of(dvv, H, bh);
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
          gemm(MatrixView::row_major(Q + q0 * d, acc, rows, d, d),
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
          gemm(MatrixView::row_major(s.data(), acc, rows, cols, kBc).transposed(),
               MatrixView::row_major(dO + q0 * dv, acc, rows, dv, dv),
               MutableMatrixView::row_major(dV + k0 * ldv, acc, cols, dv, ldv), accumulate);
          // dP = dO_q V_b^T, then dS = P * (dP - delta) in place of dP
          gemm(MatrixView::row_major(dO + q0 * dv, acc, rows, dv, dv),
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
          gemm(MatrixView::row_major(dp.data(), acc, rows, cols, kBc),
               MatrixView::row_major(K + k0 * d, acc, cols, d, d),
               MutableMatrixView::row_major(dQ + q0 * ldq, acc, rows, d, ldq), scaled);
          gemm(MatrixView::row_major(dp.data(), acc, rows, cols, kBc).transposed(),
               MatrixView::row_major(Q + q0 * d, acc, rows, d, d),
               MutableMatrixView::row_major(dK + k0 * ldk, acc, cols, d, ldk), scaled);
        }
      }
    }
  });
}

}  // namespace mixprec::kernels::attention_detail
