#pragma once
// The norm backward kernels, written once against the SIMD interface and instantiated per
// level by norm_backward_<level>.cpp (formulas: kernels/norm_backward.h). Per-group sums are
// pairwise (reduce_impl.h); per-channel sums of the channels_last path are f32 vector sums
// over blocks of kBlockRows rows, added into f64. Internal linkage (see simd_avx512.h).
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "norm_backward_kernels.h"
#include "../simd/dtype_dispatch.h"
#include "../reduce/reduce_impl.h"

namespace mixprec::kernels::norm_backward_detail {
namespace {

using elementwise_detail::kIsF64;
using elementwise_detail::kLaneDType;
using elementwise_detail::lane_t;

constexpr int64_t kBlockRows = 64;

template <class S>
typename S::F silu_derivative(typename S::F y) {
  if constexpr (kIsF64<S>) {
    const double s = 1.0 / (1.0 + std::exp(-y));
    return s * (1.0 + y * (1.0 - s));
  } else {
    return simd::silu_grad<S>(y);
  }
}

template <class S>
typename S::F lanes(const void* base, int64_t i, int m) {
  return S::load_n(static_cast<const lane_t<S>*>(base) + i, kLaneDType<S>, m);
}

template <class S>
void add_lanes(void* base, int64_t i, typename S::F v, int m) {
  lane_t<S>* p = static_cast<lane_t<S>*>(base) + i;
  S::store_n(p, kLaneDType<S>, S::add(S::load_n(p, kLaneDType<S>, m), v), m);
}

using simd::RuntimeDType;

// x, dy and dx of one dtype (the common case) get loads and stores with a constant dtype.
template <class S, class XT, class GT, class DT>
void rows_typed(const RowsPlan& p, int64_t lo, int64_t hi, void* dw_part, void* db_part, XT x_t,
                GT g_t, DT d_t) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr int W = S::kWidth;
  const DType x_dtype = x_t, grad_dtype = g_t, dx_dtype = d_t;
  const auto xe = static_cast<int64_t>(dtype_size(x_dtype));
  const auto ge = static_cast<int64_t>(dtype_size(grad_dtype));
  const auto de = static_cast<int64_t>(dtype_size(dx_dtype));
  const L* mean = static_cast<const L*>(p.mean);
  const L* rstd = static_cast<const L*>(p.rstd);
  const L inv_len = L(1) / static_cast<L>(p.len);
  for (int64_t row = lo; row < hi; ++row) {
    const char* x = static_cast<const char*>(p.x) + row * p.len * xe;
    const char* g = static_cast<const char*>(p.grad) + row * p.len * ge;
    const F mu = S::set1(p.rms ? L(0) : mean[row]);
    const F rs = S::set1(rstd[row]);
    auto xhat = [&](int64_t i, int m) {
      return S::mul(S::sub(S::load_n(x + i * xe, x_dtype, m), mu), rs);
    };
    auto gy = [&](int64_t i, int m) {
      const F v = S::load_n(g + i * ge, grad_dtype, m);
      return p.weight != nullptr ? S::mul(v, lanes<S>(p.weight, i, m)) : v;
    };
    // The parameters' per-column sums of this row: dweight's gy xhat, dbias's gy.
    auto add_params = [&](int64_t i, int m, F gv, F xh) {
      if (dw_part != nullptr) add_lanes<S>(dw_part, i, S::mul(gv, xh), m);
      if (db_part != nullptr) add_lanes<S>(db_part, i, gv, m);
    };
    if (p.dx == nullptr) {
      for (int64_t i = 0; i < p.len; i += W) {
        const int m = p.len - i < W ? static_cast<int>(p.len - i) : W;
        add_params(i, m, S::load_n(g + i * ge, grad_dtype, m), xhat(i, m));
      }
      continue;
    }
    // One walk of the row: the parameter sums and the row's sums of g' and g' xhat (g' = gy
    // times the weight), each blocked as row_sum would block it alone.
    const auto [sum_gy, sum_gyx] = reduce_detail::row_sums<S, 2>(p.len, [&](int64_t i, int m) {
      const F gv = S::load_n(g + i * ge, grad_dtype, m), xh = xhat(i, m);
      add_params(i, m, gv, xh);
      const F gw = p.weight != nullptr ? S::mul(gv, lanes<S>(p.weight, i, m)) : gv;
      return reduce_detail::Sums<S, 2>{{gw, S::mul(gw, xh)}};
    });
    const F a = S::set1(p.rms ? L(0) : sum_gy * inv_len), b = S::set1(sum_gyx * inv_len);
    char* dx = static_cast<char*>(p.dx) + row * p.len * de;
    for (int64_t i = 0; i < p.len; i += W) {
      const int m = p.len - i < W ? static_cast<int>(p.len - i) : W;
      const F v = S::mul(rs, S::sub(S::sub(gy(i, m), a), S::mul(xhat(i, m), b)));
      S::store_n(dx + i * de, dx_dtype, v, m);
    }
  }
}

template <class S>
void rows(const RowsPlan& p, int64_t lo, int64_t hi, void* dw_part, void* db_part) {
  if (p.x_dtype == p.grad_dtype && p.grad_dtype == p.dx_dtype &&
      simd::with_load_dtype<S>(
          p.x_dtype, [&](auto t) { rows_typed<S>(p, lo, hi, dw_part, db_part, t, t, t); }))
    return;
  rows_typed<S>(p, lo, hi, dw_part, db_part, RuntimeDType{p.x_dtype}, RuntimeDType{p.grad_dtype},
                RuntimeDType{p.dx_dtype});
}

template <class S>
void groups_nchw(const GroupPlan& p, int64_t lo, int64_t hi, void* dw_part, void* db_part) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr int W = S::kWidth;
  const auto xe = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto ge = static_cast<int64_t>(dtype_size(p.grad_dtype));
  const auto de = static_cast<int64_t>(dtype_size(p.dx_dtype));
  const int64_t cg = p.c / p.groups;
  const L* wv = static_cast<const L*>(p.weight);
  const L* bv = static_cast<const L*>(p.bias);
  const bool silu = p.activation == Activation::SiLU;
  for (int64_t unit = lo; unit < hi; ++unit) {
    const int64_t n = unit / p.groups, c0 = unit % p.groups * cg;
    const F mu = S::set1(static_cast<const L*>(p.mean)[unit]);
    const L rs_l = static_cast<const L*>(p.rstd)[unit];
    const F rs = S::set1(rs_l);
    double sum_a = 0.0, sum_b = 0.0;  // sum gy and sum gy xhat over the group
    // g' and xhat of channel c at [i, i + m).
    auto channel = [&](int64_t c) {
      const int64_t first = (n * p.c + c) * p.hw;
      const char* x = static_cast<const char*>(p.x) + first * xe;
      const char* g = static_cast<const char*>(p.grad) + first * ge;
      const F w = S::set1(wv != nullptr ? wv[c] : L(1));
      const F b = S::set1(bv != nullptr ? bv[c] : L(0));
      return [=](int64_t i, int m, F& xh) {
        xh = S::mul(S::sub(S::load_n(x + i * xe, p.x_dtype, m), mu), rs);
        F gv = S::load_n(g + i * ge, p.grad_dtype, m);
        if (silu) gv = S::mul(gv, silu_derivative<S>(S::fmadd(xh, w, b)));
        return gv;
      };
    };
    for (int64_t c = c0; c < c0 + cg; ++c) {
      const auto at = channel(c);
      const L s1 = reduce_detail::row_sum<S>(p.hw, [&](int64_t i, int m) {
        F xh;
        return at(i, m, xh);
      });
      const L s2 = reduce_detail::row_sum<S>(p.hw, [&](int64_t i, int m) {
        F xh;
        const F gv = at(i, m, xh);
        return S::mul(gv, xh);
      });
      if (dw_part != nullptr) static_cast<L*>(dw_part)[n * p.c + c] = s2;
      if (db_part != nullptr) static_cast<L*>(db_part)[n * p.c + c] = s1;
      const double wc = wv != nullptr ? wv[c] : 1.0;
      sum_a += wc * s1;
      sum_b += wc * s2;
    }
    if (p.dx == nullptr) continue;
    const double inv_m = 1.0 / static_cast<double>(cg * p.hw);
    const F a = S::set1(static_cast<L>(sum_a * inv_m)), b = S::set1(static_cast<L>(sum_b * inv_m));
    for (int64_t c = c0; c < c0 + cg; ++c) {
      const auto at = channel(c);
      const F w = S::set1(wv != nullptr ? wv[c] : L(1));
      char* dx = static_cast<char*>(p.dx) + (n * p.c + c) * p.hw * de;
      for (int64_t i = 0; i < p.hw; i += W) {
        const int m = p.hw - i < W ? static_cast<int>(p.hw - i) : W;
        F xh;
        const F gv = at(i, m, xh);
        const F v = S::mul(rs, S::sub(S::fmadd(gv, w, S::sub(S::zero(), a)), S::mul(xh, b)));
        S::store_n(dx + i * de, p.dx_dtype, v, m);
      }
    }
  }
}

template <class S>
void sample_nhwc(const GroupPlan& p, int64_t n, void* scratch, void* dw_part, void* db_part) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr int W = S::kWidth;
  constexpr DType kLane = kLaneDType<S>;
  const auto xe = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto ge = static_cast<int64_t>(dtype_size(p.grad_dtype));
  const auto de = static_cast<int64_t>(dtype_size(p.dx_dtype));
  const int64_t c_n = p.c, cg = p.c / p.groups;
  const L* wv = static_cast<const L*>(p.weight);
  const L* bv = static_cast<const L*>(p.bias);
  const bool silu = p.activation == Activation::SiLU;
  // Per-channel lane arrays: centre, rstd, weight, bias; then the dx coefficients.
  std::vector<L> mu(c_n), rs(c_n), w(c_n), b(c_n), blk1(c_n), blk2(c_n);
  std::vector<double> s1(c_n, 0.0), s2(c_n, 0.0);
  for (int64_t c = 0; c < c_n; ++c) {
    const int64_t unit = n * p.groups + c / cg;
    mu[c] = static_cast<const L*>(p.mean)[unit];
    rs[c] = static_cast<const L*>(p.rstd)[unit];
    w[c] = wv != nullptr ? wv[c] : L(1);
    b[c] = bv != nullptr ? bv[c] : L(0);
  }
  const char* x0 = static_cast<const char*>(p.x) + n * p.hw * c_n * xe;
  const char* g0 = static_cast<const char*>(p.grad) + n * p.hw * c_n * ge;
  L* gs = static_cast<L*>(scratch);  // [HW, C] g'
  for (int64_t r0 = 0; r0 < p.hw; r0 += kBlockRows) {
    const int64_t r1 = std::min(p.hw, r0 + kBlockRows);
    std::fill(blk1.begin(), blk1.end(), L(0));
    std::fill(blk2.begin(), blk2.end(), L(0));
    for (int64_t r = r0; r < r1; ++r) {
      const char* x = x0 + r * c_n * xe;
      const char* g = g0 + r * c_n * ge;
      for (int64_t c = 0; c < c_n; c += W) {
        const int m = c_n - c < W ? static_cast<int>(c_n - c) : W;
        const F xh = S::mul(S::sub(S::load_n(x + c * xe, p.x_dtype, m), lanes<S>(mu.data(), c, m)),
                            lanes<S>(rs.data(), c, m));
        F gv = S::load_n(g + c * ge, p.grad_dtype, m);
        if (silu)
          gv = S::mul(gv, silu_derivative<S>(
                              S::fmadd(xh, lanes<S>(w.data(), c, m), lanes<S>(b.data(), c, m))));
        S::store_n(gs + r * c_n + c, kLane, gv, m);
        add_lanes<S>(blk1.data(), c, gv, m);
        add_lanes<S>(blk2.data(), c, S::mul(gv, xh), m);
      }
    }
    for (int64_t c = 0; c < c_n; ++c) {
      s1[c] += blk1[c];
      s2[c] += blk2[c];
    }
  }
  for (int64_t c = 0; c < c_n; ++c) {
    if (dw_part != nullptr) static_cast<L*>(dw_part)[n * c_n + c] = static_cast<L>(s2[c]);
    if (db_part != nullptr) static_cast<L*>(db_part)[n * c_n + c] = static_cast<L>(s1[c]);
  }
  if (p.dx == nullptr) return;
  // dx = g' (rstd w) + (-rstd mean(gy)) + xhat (-rstd mean(gy xhat)), per channel.
  std::vector<L>& ca = blk1;
  std::vector<L>& cb = blk2;
  std::vector<L> cc(c_n);
  const double inv_m = 1.0 / static_cast<double>(cg * p.hw);
  for (int64_t grp = 0; grp < p.groups; ++grp) {
    double sa = 0.0, sb = 0.0;
    for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
      sa += w[c] * s1[c];
      sb += w[c] * s2[c];
    }
    for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
      ca[c] = rs[c] * w[c];
      cb[c] = static_cast<L>(-rs[c] * sa * inv_m);
      cc[c] = static_cast<L>(-rs[c] * sb * inv_m);
    }
  }
  char* dx0 = static_cast<char*>(p.dx) + n * p.hw * c_n * de;
  for (int64_t r = 0; r < p.hw; ++r) {
    const char* x = x0 + r * c_n * xe;
    char* dx = dx0 + r * c_n * de;
    for (int64_t c = 0; c < c_n; c += W) {
      const int m = c_n - c < W ? static_cast<int>(c_n - c) : W;
      const F xh = S::mul(S::sub(S::load_n(x + c * xe, p.x_dtype, m), lanes<S>(mu.data(), c, m)),
                          lanes<S>(rs.data(), c, m));
      const F gv = S::load_n(gs + r * c_n + c, kLane, m);
      const F v = S::fmadd(gv, lanes<S>(ca.data(), c, m),
                           S::fmadd(xh, lanes<S>(cc.data(), c, m), lanes<S>(cb.data(), c, m)));
      S::store_n(dx + c * de, p.dx_dtype, v, m);
    }
  }
}

template <class S>
constexpr NormBackwardKernels make_norm_backward_kernels() {
  return {&rows<S>, &groups_nchw<S>, &sample_nhwc<S>};
}

}  // namespace
}  // namespace mixprec::kernels::norm_backward_detail
