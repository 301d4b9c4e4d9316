#pragma once
// The loss kernels, written once against the SIMD interface and instantiated per level by
// loss_<level>.cpp. Cross-entropy of a row is logsumexp(x) - x[target], taken as
// (max - x[target]) + log(sum exp(x - max)): the first difference is exact-ish and small for
// a confident, correct prediction, where logsumexp - x[target] would cancel. Internal linkage
// throughout (see simd_avx512.h).
#include <cstdint>

#include "loss_kernels.h"
#include "../softmax/softmax_impl.h"

namespace mixprec::kernels::loss_detail {
namespace {

using elementwise_detail::lane_t;
using elementwise_detail::Math;

template <class S>
void cross_entropy_rows(const CrossEntropyPlan& p, int64_t lo, int64_t hi) {
  using L = lane_t<S>;
  const auto elem = static_cast<int64_t>(dtype_size(p.dtype));
  const auto smoothing = static_cast<L>(p.label_smoothing);
  for (int64_t row = lo; row < hi; ++row) {
    const int64_t target = p.targets[row];
    if (target == p.ignore_index) {
      p.losses[row] = 0.0;
      continue;
    }
    const char* x = static_cast<const char*>(p.logits) + row * p.c * elem;
    const auto norm = softmax_detail::row_normaliser<S>(x, p.dtype, p.c);
    const L log_sum = S::reduce_max(Math<S>::log(S::set1(norm.sum)));  // every lane holds it
    const L x_target = S::reduce_add(S::load_n(x + target * elem, p.dtype, 1));
    L shifted = norm.max - x_target;
    if (smoothing != 0) {
      // (1 - s) (lse - x_t) + s/C sum_c (lse - x_c) = (max - (1 - s) x_t - s mean(x)) + log_sum
      const L mean =
          reduce_detail::row_sum<S>(
              p.c, [&](int64_t i, int m) { return S::load_n(x + i * elem, p.dtype, m); }) /
          static_cast<L>(p.c);
      shifted = norm.max - (1 - smoothing) * x_target - smoothing * mean;
    }
    p.losses[row] = shifted + log_sum;
  }
}

// One pass for the row's max and sum of exps, one writing w (p - s/C); the target's element is
// then written again with its goal's one-hot part, from the same lane arithmetic (its
// probability taken before the row is written, so dx may be the logits themselves).
template <class S>
void cross_entropy_grad_rows(const CrossEntropyGradPlan& g, int64_t lo, int64_t hi) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr int W = S::kWidth;
  const CrossEntropyPlan& p = g.rows;
  const auto elem = static_cast<int64_t>(dtype_size(p.dtype));
  const auto dx_elem = static_cast<int64_t>(dtype_size(g.dx_dtype));
  const F uniform = S::set1(static_cast<L>(p.label_smoothing / static_cast<double>(p.c)));
  const F one_hot = S::set1(static_cast<L>(1.0 - p.label_smoothing));
  for (int64_t row = lo; row < hi; ++row) {
    const char* x = static_cast<const char*>(p.logits) + row * p.c * elem;
    char* dx = static_cast<char*>(g.dx) + row * p.c * dx_elem;
    const int64_t target = p.targets[row];
    if (target == p.ignore_index) {
      for (int64_t i = 0; i < p.c; i += W)
        S::store_n(dx + i * dx_elem, g.dx_dtype, S::zero(), p.c - i < W ? int(p.c - i) : W);
      continue;
    }
    const F w = S::set1(static_cast<L>(g.row_weights != nullptr ? g.row_weights[row] : g.weight));
    const auto norm = softmax_detail::row_normaliser<S>(x, p.dtype, p.c);
    const F max = S::set1(norm.max);
    const F inv_sum = S::div(S::set1(L{1}), S::set1(norm.sum));
    auto prob = [&](int64_t i, int m) {
      return S::mul(Math<S>::exp(S::sub(S::load_n(x + i * elem, p.dtype, m), max)), inv_sum);
    };
    const F target_grad = S::mul(w, S::sub(S::sub(prob(target, 1), uniform), one_hot));
    for (int64_t i = 0; i < p.c; i += W) {
      const int m = p.c - i < W ? static_cast<int>(p.c - i) : W;
      S::store_n(dx + i * dx_elem, g.dx_dtype, S::mul(w, S::sub(prob(i, m), uniform)), m);
    }
    S::store_n(dx + target * dx_elem, g.dx_dtype, target_grad, 1);
  }
}

template <class S>
typename S::F squared_difference(const char* a, DType at, const char* b, DType bt, int64_t i,
                                 int m) {
  const auto d = S::sub(S::load_n(a + i * static_cast<int64_t>(dtype_size(at)), at, m),
                        S::load_n(b + i * static_cast<int64_t>(dtype_size(bt)), bt, m));
  return S::mul(d, d);
}

template <class S>
double squared_error_sum(const void* a, DType at, const void* b, DType bt, int64_t n) {
  return reduce_detail::row_sum<S>(n, [&](int64_t i, int m) {
    return squared_difference<S>(static_cast<const char*>(a), at, static_cast<const char*>(b), bt,
                                 i, m);
  });
}

template <class S>
void squared_error(const void* a, DType at, const void* b, DType bt, void* out, DType ot,
                   int64_t n) {
  constexpr int W = S::kWidth;
  const auto out_elem = static_cast<int64_t>(dtype_size(ot));
  for (int64_t i = 0; i < n; i += W) {
    const int m = n - i < W ? static_cast<int>(n - i) : W;
    S::store_n(static_cast<char*>(out) + i * out_elem, ot,
               squared_difference<S>(static_cast<const char*>(a), at, static_cast<const char*>(b),
                                     bt, i, m),
               m);
  }
}

template <class S>
constexpr LossKernels make_loss_kernels() {
  return {&cross_entropy_rows<S>, &cross_entropy_grad_rows<S>, &squared_error_sum<S>,
          &squared_error<S>};
}

}  // namespace
}  // namespace mixprec::kernels::loss_detail
