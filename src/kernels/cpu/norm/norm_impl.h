#pragma once
// The norm kernels, written once against the SIMD interface and instantiated per level by
// norm_<level>.cpp. Statistics are two-pass pairwise sums (reduce_impl.h); the write pass is
// (x - mean) * scale + shift, scale = rstd * weight, which keeps the subtraction of the mean
// exact-ish instead of folding it into shift = bias - mean * scale (that loses digits when the
// mean is large against the spread). Each entry switches on x's dtype once (with_load_dtype);
// below it x's dtype X is a template parameter. Internal linkage throughout (see simd_avx512.h).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mixprec/kernels/transpose.h"
#include "norm_kernels.h"
#include "../reduce/reduce_impl.h"

namespace mixprec::kernels::norm_detail {
namespace {

using elementwise_detail::activate;
using elementwise_detail::kLaneDType;
using elementwise_detail::lane_t;
using elementwise_detail::with_activation;
using elementwise_detail::with_load_dtype;
using simd::RuntimeDType;

// One element of any float dtype, as a lane value (the other lanes of load_n are zero).
template <class S>
lane_t<S> load_scalar(const void* base, DType t, int64_t index) {
  return S::reduce_add(S::load_n(
      static_cast<const char*>(base) + index * static_cast<int64_t>(dtype_size(t)), t, 1));
}

// mean and rstd of n contiguous elements, broadcast to every lane. RMSNorm's "mean" is the
// mean of x^2.
template <class S>
struct Moments {
  typename S::F mean, rstd;
};

template <class S>
typename S::F inverse_sqrt(typename S::F v) {
  return S::div(S::set1(1.0f), S::sqrt(v));
}

template <class S, DType X>
Moments<S> moments(const char* x, int64_t n, double eps, bool rms) {
  using F = typename S::F;
  constexpr auto elem = static_cast<int64_t>(dtype_size(X));
  const auto count = static_cast<lane_t<S>>(n);
  const F eps_v = S::set1(static_cast<lane_t<S>>(eps));
  auto load = [&](int64_t i, int m) { return S::load_n(x + i * elem, X, m); };
  if (rms) {
    const F ms = S::set1(reduce_detail::row_sum<S>(n,
                                                   [&](int64_t i, int m) {
                                                     const F v = load(i, m);
                                                     return S::mul(v, v);
                                                   }) /
                         count);
    return {ms, inverse_sqrt<S>(S::add(ms, eps_v))};
  }
  const F mean = S::set1(reduce_detail::row_sum<S>(n, load) / count);
  const F var = S::set1(reduce_detail::row_sum<S>(n,
                                                  [&](int64_t i, int m) {
                                                    const F d = S::sub(load(i, m), mean);
                                                    return S::mul(d, d);
                                                  }) /
                        count);
  return {mean, inverse_sqrt<S>(S::add(var, eps_v))};
}

template <class S>
void record(double* mean, double* rstd, int64_t index, const Moments<S>& m) {
  if (mean != nullptr) mean[index] = S::reduce_max(m.mean);  // every lane holds the value
  if (rstd != nullptr) rstd[index] = S::reduce_max(m.rstd);
}

// OT, WT, BT: the output's, weight's and bias's dtypes, each a std::integral_constant (the
// common case: all of x's dtype) or a RuntimeDType.
template <class S, DType X, class OT, class WT, class BT>
void layer_norm_rows_typed(const LayerNormPlan& p, int64_t lo, int64_t hi, OT o_t, WT w_t, BT b_t) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  const DType out_dtype = o_t, weight_dtype = w_t, bias_dtype = b_t;
  constexpr auto x_elem = static_cast<int64_t>(dtype_size(X));
  const auto out_elem = static_cast<int64_t>(dtype_size(out_dtype));
  const auto w_elem = static_cast<int64_t>(dtype_size(weight_dtype));
  const auto b_elem = static_cast<int64_t>(dtype_size(bias_dtype));
  const char* w = static_cast<const char*>(p.weight);
  const char* b = static_cast<const char*>(p.bias);
  for (int64_t row = lo; row < hi; ++row) {
    const char* x = static_cast<const char*>(p.x) + row * p.len * x_elem;
    char* out = static_cast<char*>(p.out) + row * p.len * out_elem;
    const Moments<S> mo = moments<S, X>(x, p.len, p.eps, p.rms);
    record<S>(p.mean, p.rstd, row, mo);
    const F center = p.rms ? S::zero() : mo.mean;
    for (int64_t i = 0; i < p.len; i += W) {
      const int m = p.len - i < W ? static_cast<int>(p.len - i) : W;
      F v = S::mul(S::sub(S::load_n(x + i * x_elem, X, m), center), mo.rstd);
      if (w != nullptr) v = S::mul(v, S::load_n(w + i * w_elem, weight_dtype, m));
      if (b != nullptr) v = S::add(v, S::load_n(b + i * b_elem, bias_dtype, m));
      S::store_n(out + i * out_elem, out_dtype, v, m);
    }
  }
}

template <class S, DType X>
void layer_norm_rows_typed(const LayerNormPlan& p, int64_t lo, int64_t hi) {
  const bool all_x = p.out_dtype == X && (p.weight == nullptr || p.weight_dtype == X) &&
                     (p.bias == nullptr || p.bias_dtype == X);
  if (all_x) {
    constexpr std::integral_constant<DType, X> x;
    return layer_norm_rows_typed<S, X>(p, lo, hi, x, x, x);
  }
  layer_norm_rows_typed<S, X>(p, lo, hi, RuntimeDType{p.out_dtype}, RuntimeDType{p.weight_dtype},
                              RuntimeDType{p.bias_dtype});
}

// Rows of a few elements (LayerNorm over the channels of each pixel, where a pixel has 8 or 16
// of them): a vector per row would be mostly empty lanes and a horizontal sum per row. Blocks of
// rows are transposed into channel rows (transpose_2d's narrow path), so each vector holds one
// channel of W rows, the statistics are sums down the channels, and the result is transposed
// back. Inference only: nothing records mean and rstd here.
constexpr int64_t kNarrowBlock = 256;  // rows per block

template <class S>
bool layer_norm_narrow_takes(const LayerNormPlan& p) {
  const std::size_t in = dtype_size(p.x_dtype), out = dtype_size(p.out_dtype);
  return S::kWidth >= 8 && !p.rms && p.mean == nullptr && p.rstd == nullptr &&
         p.x_dtype != DType::F64 && in == out && p.len * static_cast<int64_t>(in) <= 32 &&
         p.len >= 2 && (p.len & (p.len - 1)) == 0 && p.rows >= kNarrowBlock;
}

template <class S, DType X>
void layer_norm_narrow_typed(const LayerNormPlan& p, int64_t lo, int64_t hi) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  const int64_t c = p.len;
  const auto es = static_cast<int64_t>(dtype_size(X));
  alignas(64) char in[kNarrowBlock * 16 * 4], out[kNarrowBlock * 16 * 4];
  F weight[16], bias[16];
  for (int64_t k = 0; k < c; ++k) {
    weight[k] = p.weight ? S::set1(load_scalar<S>(p.weight, p.weight_dtype, k)) : S::set1(1.0f);
    bias[k] = p.bias ? S::set1(load_scalar<S>(p.bias, p.bias_dtype, k)) : S::zero();
  }
  const auto count = static_cast<lane_t<S>>(c);
  const F eps = S::set1(static_cast<lane_t<S>>(p.eps));
  for (int64_t r0 = lo; r0 < hi; r0 += kNarrowBlock) {
    const int64_t n = std::min(kNarrowBlock, hi - r0);
    transpose_2d(static_cast<const char*>(p.x) + r0 * c * es, n, c, c, in, kNarrowBlock,
                 static_cast<std::size_t>(es));
    for (int64_t i = 0; i < n; i += W) {
      const int m = n - i < W ? static_cast<int>(n - i) : W;
      auto load = [&](int64_t k) { return S::load_n(in + (k * kNarrowBlock + i) * es, X, m); };
      F sum = load(0);
      for (int64_t k = 1; k < c; ++k) sum = S::add(sum, load(k));
      const F mean = S::div(sum, S::set1(count));
      F sq = S::zero();
      for (int64_t k = 0; k < c; ++k) {
        const F d = S::sub(load(k), mean);
        sq = S::add(sq, S::mul(d, d));
      }
      const F rstd = inverse_sqrt<S>(S::add(S::div(sq, S::set1(count)), eps));
      for (int64_t k = 0; k < c; ++k)
        S::store_n(out + (k * kNarrowBlock + i) * es, p.out_dtype,
                   S::add(S::mul(S::mul(S::sub(load(k), mean), rstd), weight[k]), bias[k]), m);
    }
    transpose_2d(out, c, n, kNarrowBlock, static_cast<char*>(p.out) + r0 * c * es, c,
                 static_cast<std::size_t>(es));
  }
}

template <class S>
void layer_norm_rows(const LayerNormPlan& p, int64_t lo, int64_t hi) {
  if (layer_norm_narrow_takes<S>(p)) {
    with_load_dtype<S>(p.x_dtype, [&](auto x) {
      if constexpr (decltype(x)::value != DType::F64)
        layer_norm_narrow_typed<S, decltype(x)::value>(p, lo, hi);
    });
    return;
  }
  with_load_dtype<S>(p.x_dtype,
                     [&](auto x) { layer_norm_rows_typed<S, decltype(x)::value>(p, lo, hi); });
}

template <class S, DType X, Activation A>
void group_norm_units(const GroupNormPlan& p, int64_t lo, int64_t hi) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr auto x_elem = static_cast<int64_t>(dtype_size(X));
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  const int64_t per_group = p.c / p.groups;
  for (int64_t unit = lo; unit < hi; ++unit) {
    const int64_t first =
        (unit / p.groups * p.c + unit % p.groups * per_group) * p.hw;  // element offset
    const char* x = static_cast<const char*>(p.x) + first * x_elem;
    char* out = static_cast<char*>(p.out) + first * out_elem;
    const Moments<S> mo = moments<S, X>(x, per_group * p.hw, p.eps, false);
    record<S>(p.mean, p.rstd, unit, mo);
    for (int64_t k = 0; k < per_group; ++k) {
      const int64_t channel = unit % p.groups * per_group + k;
      const F scale =
          p.weight ? S::mul(mo.rstd, S::set1(load_scalar<S>(p.weight, p.weight_dtype, channel)))
                   : mo.rstd;
      const F shift = p.bias ? S::set1(load_scalar<S>(p.bias, p.bias_dtype, channel)) : S::zero();
      const char* xc = x + k * p.hw * x_elem;
      char* oc = out + k * p.hw * out_elem;
      for (int64_t i = 0; i < p.hw; i += W) {
        const int m = p.hw - i < W ? static_cast<int>(p.hw - i) : W;
        const F v = S::fmadd(S::sub(S::load_n(xc + i * x_elem, X, m), mo.mean), scale, shift);
        S::store_n(oc + i * out_elem, p.out_dtype, activate<S, A>(v), m);
      }
    }
  }
}

template <class S>
void group_norm(const GroupNormPlan& p, int64_t lo, int64_t hi) {
  with_load_dtype<S>(p.x_dtype, [&](auto x) {
    with_activation(p.activation, [&](auto act) {
      group_norm_units<S, decltype(x)::value, decltype(act)::value>(p, lo, hi);
    });
  });
}

template <class S, DType X>
void channel_sums_typed(const GroupNormPlan& p, int64_t n, int64_t r0, int64_t r1,
                        const void* center, double* sums) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr auto kLane = kLaneDType<S>;
  constexpr auto elem = static_cast<int64_t>(dtype_size(X));
  const auto lane_elem = static_cast<int64_t>(sizeof(lane_t<S>));
  const char* x = static_cast<const char*>(p.x) + n * p.hw * p.c * elem;
  const int64_t width = int64_t{reduce_detail::kStripVectors} * W;
  for (int64_t c0 = 0; c0 < p.c; c0 += width) {
    reduce_detail::with_strip<S>(c0, p.c - c0 < width ? p.c - c0 : width, [&](const auto& s) {
      constexpr int V = std::remove_reference_t<decltype(s)>::kVectors;
      auto load = [&](int64_t r, int j) { return s.template load<X>(x + r * p.c * elem, j); };
      F acc[V];
      if (center == nullptr) {
        reduce_detail::column_sums<S, V>(r0, r1, load, acc);
      } else {
        F mean[V];
        for (int j = 0; j < V; ++j)
          mean[j] = s.load(static_cast<const char*>(center), kLane, lane_elem, j);
        reduce_detail::column_sums<S, V>(
            r0, r1,
            [&](int64_t r, int j) {
              const F d = S::sub(load(r, j), mean[j]);
              return S::mul(d, d);
            },
            acc);
      }
      for (int j = 0; j < V; ++j) {
        alignas(64) lane_t<S> lanes[W];
        S::store(lanes, acc[j]);
        for (int l = 0; l < s.m[j]; ++l) sums[s.c0 + j * W + l] = lanes[l];
      }
    });
  }
}

template <class S>
void channel_sums(const GroupNormPlan& p, int64_t n, int64_t r0, int64_t r1, const void* center,
                  double* sums) {
  with_load_dtype<S>(p.x_dtype, [&](auto x) {
    channel_sums_typed<S, decltype(x)::value>(p, n, r0, r1, center, sums);
  });
}

template <class S, DType X, DType O, Activation A>
void apply_rows(const GroupNormPlan& p, int64_t n, int64_t r0, int64_t r1, const char* center,
                const char* scale, const char* shift) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr auto kLane = kLaneDType<S>;
  constexpr auto lane_elem = static_cast<int64_t>(sizeof(lane_t<S>));
  constexpr auto x_elem = static_cast<int64_t>(dtype_size(X));
  constexpr auto out_elem = static_cast<int64_t>(dtype_size(O));
  // The plan's pointers in locals: the stores below could alias the plan, so the compiler
  // would otherwise reload them after every vector.
  const char* const x_base = static_cast<const char*>(p.x);
  char* const out_base = static_cast<char*>(p.out);
  const int64_t c_all = p.c, full = c_all / W * W;
  auto one = [&](const char* x, char* out, int64_t c, int m) {
    const F d =
        S::sub(S::load_n(x + c * x_elem, X, m), S::load_n(center + c * lane_elem, kLane, m));
    const F v = S::fmadd(d, S::load_n(scale + c * lane_elem, kLane, m),
                         S::load_n(shift + c * lane_elem, kLane, m));
    S::store_n(out + c * out_elem, O, activate<S, A>(v), m);
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t first = (n * p.hw + r) * c_all;
    const char* x = x_base + first * x_elem;
    char* out = out_base + first * out_elem;
    for (int64_t c = 0; c < full; c += W) one(x, out, c, W);
    if (full < c_all) one(x, out, full, static_cast<int>(c_all - full));
  }
}

template <class S>
void channels_last_apply(const GroupNormPlan& p, int64_t n, int64_t r0, int64_t r1,
                         const void* center, const void* scale, const void* shift) {
  with_load_dtype<S>(p.x_dtype, [&](auto x) {
    with_load_dtype<S>(p.out_dtype, [&](auto out) {
      with_activation(p.activation, [&](auto act) {
        apply_rows<S, decltype(x)::value, decltype(out)::value, decltype(act)::value>(
            p, n, r0, r1, static_cast<const char*>(center), static_cast<const char*>(scale),
            static_cast<const char*>(shift));
      });
    });
  });
}

template <class S>
constexpr NormKernels make_norm_kernels() {
  return {&layer_norm_rows<S>, &group_norm<S>, &channel_sums<S>, &channels_last_apply<S>};
}

}  // namespace
}  // namespace mixprec::kernels::norm_detail
