#pragma once
// The softmax kernels, written once against the SIMD interface and instantiated per level by
// softmax_<level>.cpp; row_normaliser is also what cross-entropy builds on (loss_impl.h).
// Three passes over each line: max, sum of exp(x - max), write. The write pass recomputes
// exp rather than keeping the exps of pass two: that would need an f32 line buffer, or a
// second rounding when out is 16-bit. Internal linkage throughout (see simd_avx512.h).
#include <cstdint>

#include "../reduce/reduce_impl.h"
#include "softmax_kernels.h"

namespace mixprec::kernels::softmax_detail {
namespace {

using elementwise_detail::lane_t;
using elementwise_detail::Math;
using reduce_detail::Strip;

// The max of a row and the sum of exp(x - max) over it: log(sum) + max is its logsumexp.
template <class S>
struct Normaliser {
  lane_t<S> max;
  lane_t<S> sum;
};

template <class S>
Normaliser<S> row_normaliser(const char* x, DType t, int64_t len) {
  const auto elem = static_cast<int64_t>(dtype_size(t));
  auto load = [&](int64_t i, int m) { return S::load_n(x + i * elem, t, m); };
  const lane_t<S> max = reduce_detail::row_max<S>(len, load);
  const auto m = S::set1(max);
  const lane_t<S> sum = reduce_detail::row_sum<S>(
      len, [&](int64_t i, int n) { return Math<S>::exp(S::sub(load(i, n), m)); });
  return {max, sum};
}

template <class S>
void softmax_row(const SoftmaxPlan& p, const char* x, char* out) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  const auto x_elem = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  const Normaliser<S> norm = row_normaliser<S>(x, p.x_dtype, p.len);
  const F max = S::set1(norm.max);
  const F log_sum = Math<S>::log(S::set1(norm.sum));
  const F inv_sum = S::div(S::set1(1.0f), S::set1(norm.sum));
  for (int64_t i = 0; i < p.len; i += W) {
    const int m = p.len - i < W ? static_cast<int>(p.len - i) : W;
    const F shifted = S::sub(S::load_n(x + i * x_elem, p.x_dtype, m), max);
    const F y = p.log ? S::sub(shifted, log_sum) : S::mul(Math<S>::exp(shifted), inv_sum);
    S::store_n(out + i * out_elem, p.out_dtype, y, m);
  }
}

template <class S, int V>
void softmax_strip(const SoftmaxPlan& p, const char* x, char* out, const Strip<S, V>& s) {
  using F = typename S::F;
  const auto x_elem = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  auto load = [&](int64_t r, int j) {
    if (j == 0) s.prefetch(x + (r + reduce_detail::kPrefetchRows) * p.inner * x_elem, x_elem);
    return s.load(x + r * p.inner * x_elem, p.x_dtype, x_elem, j);
  };
  F max[V], sum[V], scale[V];
  reduce_detail::column_max<S, V>(p.len, load, max);
  reduce_detail::column_sums<S, V>(
      0, p.len, [&](int64_t r, int j) { return Math<S>::exp(S::sub(load(r, j), max[j])); }, sum);
  for (int j = 0; j < V; ++j)
    scale[j] = p.log ? Math<S>::log(sum[j]) : S::div(S::set1(1.0f), sum[j]);
  for (int64_t r = 0; r < p.len; ++r)
    for (int j = 0; j < V; ++j) {
      const F shifted = S::sub(load(r, j), max[j]);
      const F y = p.log ? S::sub(shifted, scale[j]) : S::mul(Math<S>::exp(shifted), scale[j]);
      s.store(out + r * p.inner * out_elem, p.out_dtype, out_elem, j, y);
    }
}

template <class S>
void softmax_lines(const SoftmaxPlan& p, int64_t lo, int64_t hi) {
  const auto x_elem = static_cast<int64_t>(dtype_size(p.x_dtype));
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  const char* x = static_cast<const char*>(p.x);
  char* out = static_cast<char*>(p.out);
  const int64_t line = p.len * p.inner;  // elements per outer index
  if (p.inner == 1) {
    for (int64_t o = lo; o < hi; ++o)
      softmax_row<S>(p, x + o * line * x_elem, out + o * line * out_elem);
    return;
  }
  const int64_t width = int64_t{reduce_detail::kStripVectors} * S::kWidth;
  const int64_t strips = (p.inner + width - 1) / width;
  for (int64_t unit = lo; unit < hi; ++unit) {
    const int64_t o = unit / strips, c0 = unit % strips * width;
    reduce_detail::with_strip<S>(
        c0, p.inner - c0 < width ? p.inner - c0 : width, [&](const auto& strip) {
          softmax_strip<S>(p, x + o * line * x_elem, out + o * line * out_elem, strip);
        });
  }
}

template <class S>
constexpr SoftmaxKernels make_softmax_kernels() {
  return {reduce_detail::kStripVectors * S::kWidth, &softmax_lines<S>};
}

}  // namespace
}  // namespace mixprec::kernels::softmax_detail
