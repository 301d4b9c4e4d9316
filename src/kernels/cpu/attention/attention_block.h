#pragma once
// The online-softmax block update (attention_internal.h), written once against the SIMD
// interface and instantiated per level. Internal linkage (see simd_avx512.h).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_internal.h"
#include "../simd/simd_math.h"

namespace mixprec::kernels::attention_detail {
namespace {

template <class S>
float horizontal(typename S::F v, bool take_max) {
  float lanes[S::kWidth];
  S::store(lanes, v);
  float r = lanes[0];
  for (int i = 1; i < S::kWidth; ++i) r = take_max ? (lanes[i] > r ? lanes[i] : r) : r + lanes[i];
  return r;
}

template <class S>
void block_update(float* s, int64_t ld_s, int rows, int cols, float* m, float* l, void* p,
                  DType p_dtype, int64_t ld_p, float* o, int64_t ld_o, int dv) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  const float neg_inf = -INFINITY;
  const std::size_t p_size = dtype_size(p_dtype);
  for (int r = 0; r < rows; ++r) {
    float* srow = s + r * ld_s;
    char* prow = static_cast<char*>(p) + static_cast<std::size_t>(r * ld_p) * p_size;
    F vmax = S::set1(neg_inf);
    int j = 0;
    for (; j + W <= cols; j += W) vmax = S::max(S::load(srow + j), vmax);
    float row_max = horizontal<S>(vmax, true);
    for (; j < cols; ++j) row_max = srow[j] > row_max ? srow[j] : row_max;
    const float m_new = m[r] > row_max ? m[r] : row_max;
    if (m_new == neg_inf) {  // nothing visible yet: p = 0, state unchanged
      for (int j = 0; j < cols; j += W) S::store_n(prow + j * p_size, p_dtype, S::zero(), cols - j);
      continue;
    }
    const float alpha = m[r] == neg_inf ? 0.0f : std::exp(m[r] - m_new);
    const F shift = S::set1(m_new);
    F vsum = S::zero();
    // P's dtype as a constant inside the loop: the conversions' switches fold away.
    auto exp_pass = [&](auto dtype_tag) {
      constexpr DType pt = decltype(dtype_tag)::value;
      for (int j = 0; j < cols; j += W) {
        const int n = cols - j;
        const F e = simd::exp<S>(S::sub(S::load_n(srow + j, DType::F32, n), shift));
        S::store_n(prow + j * p_size, pt, e, n);
        // Sum what is multiplied: e rounded to P's dtype, in registers (reloading the masked
        // store just made would stall on store forwarding). Lanes past n hold exp(0 - max).
        vsum = S::add(vsum, S::fill_tail(S::round_to(pt, e), n, 0.0f));
      }
    };
    switch (p_dtype) {
      case DType::BF16:
        exp_pass(std::integral_constant<DType, DType::BF16>{});
        break;
      case DType::F16:
        exp_pass(std::integral_constant<DType, DType::F16>{});
        break;
      default:
        exp_pass(std::integral_constant<DType, DType::F32>{});
        break;
    }
    l[r] = alpha * l[r] + horizontal<S>(vsum, false);
    if (alpha != 1.0f) {
      float* orow = o + r * ld_o;
      const F va = S::set1(alpha);
      for (int j = 0; j < dv; j += W)
        S::store_n(orow + j, DType::F32, S::mul(S::load_n(orow + j, DType::F32, dv - j), va),
                   dv - j);
    }
    m[r] = m_new;
  }
}

template <class S>
void recompute_probs(float* s, int64_t ld_s, int rows, int cols, const float* lse) {
  constexpr int W = S::kWidth;
  for (int r = 0; r < rows; ++r) {
    float* srow = s + r * ld_s;
    if (lse[r] == -INFINITY) {  // the forward wrote a zero row: no probability anywhere
      for (int j = 0; j < cols; ++j) srow[j] = 0.0f;
      continue;
    }
    const typename S::F shift = S::set1(lse[r]);
    for (int j = 0; j < cols; j += W) {
      const int n = cols - j;
      S::store_n(srow + j, DType::F32,
                 simd::exp<S>(S::sub(S::load_n(srow + j, DType::F32, n), shift)), n);
    }
  }
}

template <class S>
void softmax_grad(const float* p, int64_t ld_p, float* dp, int64_t ld_dp, int rows, int cols,
                  const float* delta) {
  constexpr int W = S::kWidth;
  for (int r = 0; r < rows; ++r) {
    const float* prow = p + r * ld_p;
    float* drow = dp + r * ld_dp;
    const typename S::F d = S::set1(delta[r]);
    for (int j = 0; j < cols; j += W) {
      const int n = cols - j;
      S::store_n(
          drow + j, DType::F32,
          S::mul(S::load_n(prow + j, DType::F32, n), S::sub(S::load_n(drow + j, DType::F32, n), d)),
          n);
    }
  }
}

}  // namespace
}  // namespace mixprec::kernels::attention_detail
