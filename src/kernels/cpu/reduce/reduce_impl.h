#pragma once
// The reduction kernels, written once against the SIMD interface and instantiated per level by
// reduce_<level>.cpp, and the summation building blocks softmax, norms and losses share:
//
//   row_sum(n, f)    sum over the elements of a row, f(i, m) giving the vector of elements
//                    [i, i + m) (lanes past m are ignored)
//   row_max(n, f)    max of the same, NaN if any element is NaN
//   Strip            a strip of up to kStripVectors vectors of columns, each lane its own line
//   column_sums(...) per-lane sums down the rows of a strip, f(r, j) giving vector j of row r
//   column_max(...)
//
// Sums are blocked pairwise: in a leaf, kAccumulators independent vector accumulators add at
// most kLeafVectors vectors each (row case) or one accumulator per vector adds at most
// kLeafRows rows (column case); leaves are combined in a binary tree. The error is then
// O(leaf + log2 n) roundings instead of O(n), without the cost of a compensated sum.
// Internal linkage throughout (see simd_avx512.h for why).
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "../elementwise/elementwise_impl.h"
#include "reduce_kernels.h"

namespace mixprec::kernels::reduce_detail {
namespace {

using elementwise_detail::kIsF64;
using elementwise_detail::lane_t;
using elementwise_detail::with_load_dtype;

constexpr int kAccumulators = 4;
constexpr int64_t kLeafVectors = 16;  // per accumulator
constexpr int64_t kLeafRows = 64;
constexpr int kStripVectors = 8;

template <class S>
constexpr lane_t<S> kInfinity = std::numeric_limits<lane_t<S>>::infinity();

// N sums at once over one walk of [lo, hi), each blocked exactly as sum_vectors blocks it
// alone (so its bits do not depend on N): f(i, m) gives the vectors of elements [i, i + m) of
// each sum (Sums<S, N>) and is called once per vector in increasing order (it may have side
// effects, such as a norm backward's per-column sums). A leaf is forced inline into its caller,
// so f's captures stay in registers (a vector store in f may alias any memory the compiler
// would otherwise reload them from).
template <class S, std::size_t N>
struct Sums {
  typename S::F v[N];
  friend Sums operator+(const Sums& a, const Sums& b) {
    Sums c;
    for (std::size_t k = 0; k < N; ++k) c.v[k] = S::add(a.v[k], b.v[k]);
    return c;
  }
};

template <class S, std::size_t N, class Fn>
[[gnu::always_inline]] inline Sums<S, N> sum_leaf(int64_t lo, int64_t hi, const Fn& f) {
  constexpr int W = S::kWidth;
  Sums<S, N> acc[kAccumulators];
  for (Sums<S, N>& a : acc)
    for (typename S::F& v : a.v) v = S::zero();
  int64_t i = lo;
  for (; i + kAccumulators * W <= hi; i += kAccumulators * W)
    for (int k = 0; k < kAccumulators; ++k) acc[k] = acc[k] + f(i + k * W, W);
  for (; i + W <= hi; i += W) acc[0] = acc[0] + f(i, W);
  if (i < hi) {
    const int m = static_cast<int>(hi - i);
    Sums<S, N> tail = f(i, m);
    for (typename S::F& v : tail.v) v = S::fill_tail(v, m, 0.0f);
    acc[1] = acc[1] + tail;
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

template <class S, std::size_t N, class Fn>
Sums<S, N> sum_tree(int64_t lo, int64_t hi, const Fn& f) {
  constexpr int W = S::kWidth;
  if (hi - lo <= kLeafVectors * kAccumulators * W) return sum_leaf<S, N>(lo, hi, f);
  // Split at a whole vector, so only the last vector can be partial.
  const int64_t mid = lo + ((hi - lo) / 2 + W - 1) / W * W;
  const Sums<S, N> left = sum_tree<S, N>(lo, mid, f);
  return left + sum_tree<S, N>(mid, hi, f);
}

template <class S, std::size_t N, class Fn>
[[gnu::always_inline]] inline Sums<S, N> sum_vectors_n(int64_t lo, int64_t hi, const Fn& f) {
  constexpr int W = S::kWidth;
  return hi - lo <= kLeafVectors * kAccumulators * W ? sum_leaf<S, N>(lo, hi, f)
                                                    : sum_tree<S, N>(lo, hi, f);
}

// One sum: sum_vectors_n's blocking for N = 1, kept as its own function because routing it
// through sum_vectors_n (forced inline) made the LayerNorm forward's moments slower (0.085 ->
// 0.118 ms at [2048, 384], session 23).
template <class S, class Fn>
typename S::F sum_vectors(int64_t lo, int64_t hi, const Fn& f) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr int64_t kLeaf = kLeafVectors * kAccumulators * W;
  if (hi - lo > kLeaf) {  // split at a whole vector, so only the last vector can be partial
    const int64_t mid = lo + ((hi - lo) / 2 + W - 1) / W * W;
    return S::add(sum_vectors<S>(lo, mid, f), sum_vectors<S>(mid, hi, f));
  }
  F acc[kAccumulators];
  for (F& a : acc) a = S::zero();
  int64_t i = lo;
  for (; i + kAccumulators * W <= hi; i += kAccumulators * W)
    for (int k = 0; k < kAccumulators; ++k) acc[k] = S::add(acc[k], f(i + k * W, W));
  for (; i + W <= hi; i += W) acc[0] = S::add(acc[0], f(i, W));
  if (i < hi) {
    const int m = static_cast<int>(hi - i);
    acc[1] = S::add(acc[1], S::fill_tail(f(i, m), m, 0.0f));
  }
  return S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3]));
}

template <class S, class Fn>
lane_t<S> row_sum(int64_t n, const Fn& f) {
  return S::reduce_add(sum_vectors<S>(0, n, f));
}

// row_sum of N rows of values at once (sum_vectors_n).
template <class S, std::size_t N, class Fn>
std::array<lane_t<S>, N> row_sums(int64_t n, const Fn& f) {
  const Sums<S, N> sums = sum_vectors_n<S, N>(0, n, f);
  std::array<lane_t<S>, N> out;
  for (std::size_t k = 0; k < N; ++k) out[k] = S::reduce_add(sums.v[k]);
  return out;
}

// NaN sticks: x86 max returns its second operand (acc) when either is NaN, and the select
// takes a NaN x.
template <class S>
typename S::F max_step(typename S::F acc, typename S::F x) {
  return S::select_nan(x, x, S::max(x, acc));
}

template <class S, class Fn>
lane_t<S> row_max(int64_t n, const Fn& f) {
  constexpr int W = S::kWidth;
  const auto lowest = S::set1(-kInfinity<S>);
  typename S::F acc0 = lowest, acc1 = lowest;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    acc0 = max_step<S>(acc0, f(i, W));
    acc1 = max_step<S>(acc1, f(i + W, W));
  }
  for (; i < n; i += W) {
    const int m = n - i < W ? static_cast<int>(n - i) : W;
    acc0 = max_step<S>(acc0, S::fill_tail(f(i, m), m, -kInfinity<S>));
  }
  return S::reduce_max(max_step<S>(acc0, acc1));
}

// V vectors of columns starting at column c0; m[j] valid lanes in vector j (0 past the end:
// load_n with n <= 0 reads no memory).
template <class S, int V>
struct Strip {
  static constexpr int kVectors = V;
  int64_t c0;
  int m[V];
  Strip(int64_t first, int64_t width) : c0(first) {
    for (int j = 0; j < V; ++j) {
      const int64_t left = width - int64_t{j} * S::kWidth;
      m[j] = left <= 0 ? 0 : left >= S::kWidth ? S::kWidth : static_cast<int>(left);
    }
  }
  // Vector j of a row whose element c is at row + c * elem.
  typename S::F load(const char* row, DType t, int64_t elem, int j) const {
    return S::load_n(row + (c0 + int64_t{j} * S::kWidth) * elem, t, m[j]);
  }
  // The same for a dtype T known at compile time (its switch folds away).
  template <DType T>
  typename S::F load(const char* row, int j) const {
    return load(row, T, static_cast<int64_t>(dtype_size(T)), j);
  }
  void store(char* row, DType t, int64_t elem, int j, typename S::F v) const {
    S::store_n(row + (c0 + int64_t{j} * S::kWidth) * elem, t, v, m[j]);
  }
  // Asks for the strip's lines of a row ahead of its loads. A walk down a strip reads a few
  // lines of each row, rows far apart, and the hardware prefetchers do not follow it: summing
  // 2048 x 1536 bf16 (a linear layer's bias gradient) ran at 5-8 GB/s in 128-column strips,
  // 31 GB/s with each row's lines asked for kPrefetchRows rows ahead (Zen 5). A prefetch
  // never faults, past the end included.
  void prefetch(const char* row, std::size_t elem) const {
    const std::size_t bytes = static_cast<std::size_t>(V * S::kWidth) * elem;
    for (std::size_t b = 0; b < bytes; b += 64)
      __builtin_prefetch(row + static_cast<std::size_t>(c0) * elem + b);
  }
};
constexpr int64_t kPrefetchRows = 8;

// Calls f(strip) with the fewest vectors (1, 2, 4 or kStripVectors) that cover `width`
// columns, so narrow strips do not run eight vectors of nothing.
template <class S, class Fn>
void with_strip(int64_t c0, int64_t width, Fn&& f) {
  const int64_t vectors = (width + S::kWidth - 1) / S::kWidth;
  if (vectors <= 1)
    f(Strip<S, 1>(c0, width));
  else if (vectors <= 2)
    f(Strip<S, 2>(c0, width));
  else if (vectors <= 4)
    f(Strip<S, 4>(c0, width));
  else
    f(Strip<S, kStripVectors>(c0, width));
}

// acc[j] = sum over rows [r0, r1) of f(r, j), pairwise over blocks of kLeafRows rows.
template <class S, int V, class Fn>
void column_sums(int64_t r0, int64_t r1, const Fn& f, typename S::F (&acc)[V]) {
  if (r1 - r0 > kLeafRows) {
    typename S::F upper[V];
    const int64_t mid = r0 + (r1 - r0) / 2;
    column_sums<S, V>(r0, mid, f, acc);
    column_sums<S, V>(mid, r1, f, upper);
    for (int j = 0; j < V; ++j) acc[j] = S::add(acc[j], upper[j]);
    return;
  }
  for (int j = 0; j < V; ++j) acc[j] = S::zero();
  for (int64_t r = r0; r < r1; ++r)
    for (int j = 0; j < V; ++j) acc[j] = S::add(acc[j], f(r, j));
}

template <class S, int V, class Fn>
void column_max(int64_t rows, const Fn& f, typename S::F (&acc)[V]) {
  for (int j = 0; j < V; ++j) acc[j] = S::set1(-kInfinity<S>);
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < V; ++j) acc[j] = max_step<S>(acc[j], f(r, j));
}

// ---- the reduction kernels ----

template <class S>
lane_t<S> divisor(const ReducePlan& p) {
  if (p.kind != ReduceKind::Var) return static_cast<lane_t<S>>(p.len);
  const double d = static_cast<double>(p.len) - p.correction;
  return static_cast<lane_t<S>>(d > 0.0 ? d : 0.0);
}

// Below reduce_lines and reduce_partial, x's dtype X is a compile-time value (switched on once).
template <class S, DType X>
lane_t<S> reduce_row(const ReducePlan& p, const char* x) {
  using F = typename S::F;
  constexpr auto elem = static_cast<int64_t>(dtype_size(X));
  auto load = [&](int64_t i, int m) { return S::load_n(x + i * elem, X, m); };
  switch (p.kind) {
    case ReduceKind::Max:
      return row_max<S>(p.len, load);
    case ReduceKind::Min:
      return -row_max<S>(p.len, [&](int64_t i, int m) { return S::sub(S::zero(), load(i, m)); });
    case ReduceKind::Sum:
      return row_sum<S>(p.len, load);
    case ReduceKind::Mean:
      return row_sum<S>(p.len, load) / divisor<S>(p);
    case ReduceKind::Var: {
      const F mean = S::set1(row_sum<S>(p.len, load) / static_cast<lane_t<S>>(p.len));
      const lane_t<S> ss = row_sum<S>(p.len, [&](int64_t i, int m) {
        const F d = S::sub(load(i, m), mean);
        return S::mul(d, d);
      });
      return ss / divisor<S>(p);
    }
  }
  return 0;
}

template <class S, DType X, int V>
void reduce_strip(const ReducePlan& p, const char* x, char* out, const Strip<S, V>& s) {
  using F = typename S::F;
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  const int64_t row_bytes = p.inner * static_cast<int64_t>(dtype_size(X));
  auto load = [&](int64_t r, int j) {
    if (j == 0) s.prefetch(x + (r + kPrefetchRows) * row_bytes, dtype_size(X));
    return s.template load<X>(x + r * row_bytes, j);
  };
  F acc[V];
  if (p.kind == ReduceKind::Max) {
    column_max<S, V>(p.len, load, acc);
  } else if (p.kind == ReduceKind::Min) {
    column_max<S, V>(
        p.len, [&](int64_t r, int j) { return S::sub(S::zero(), load(r, j)); }, acc);
    for (F& a : acc) a = S::sub(S::zero(), a);
  } else {
    column_sums<S, V>(0, p.len, load, acc);
    if (p.kind == ReduceKind::Var) {
      F mean[V];
      for (int j = 0; j < V; ++j) mean[j] = S::div(acc[j], S::set1(static_cast<lane_t<S>>(p.len)));
      column_sums<S, V>(
          0, p.len,
          [&](int64_t r, int j) {
            const F d = S::sub(load(r, j), mean[j]);
            return S::mul(d, d);
          },
          acc);
    }
    if (p.kind != ReduceKind::Sum)
      for (F& a : acc) a = S::div(a, S::set1(divisor<S>(p)));
  }
  for (int j = 0; j < V; ++j) s.store(out, p.out_dtype, out_elem, j, acc[j]);
}

template <class S, DType X>
void reduce_lines_typed(const ReducePlan& p, int64_t lo, int64_t hi) {
  constexpr auto x_elem = static_cast<int64_t>(dtype_size(X));
  const auto out_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  const char* x = static_cast<const char*>(p.x);
  char* out = static_cast<char*>(p.out);
  if (p.inner == 1) {
    for (int64_t o = lo; o < hi; ++o)
      S::store_n(out + o * out_elem, p.out_dtype,
                 S::set1(reduce_row<S, X>(p, x + o * p.len * x_elem)), 1);
    return;
  }
  const int64_t width = int64_t{kStripVectors} * S::kWidth;
  const int64_t strips = (p.inner + width - 1) / width;
  for (int64_t unit = lo; unit < hi; ++unit) {
    const int64_t o = unit / strips, c0 = unit % strips * width;
    const int64_t cols = p.inner - c0 < width ? p.inner - c0 : width;
    with_strip<S>(c0, cols, [&](const auto& strip) {
      reduce_strip<S, X>(p, x + o * p.len * p.inner * x_elem, out + o * p.inner * out_elem,
                         strip);
    });
  }
}

template <class S>
void reduce_lines(const ReducePlan& p, int64_t lo, int64_t hi) {
  with_load_dtype<S>(p.x_dtype,
                     [&](auto x) { reduce_lines_typed<S, decltype(x)::value>(p, lo, hi); });
}

template <class S, DType X>
double reduce_partial_typed(PartialKind kind, const char* x, int64_t n, double center) {
  using F = typename S::F;
  constexpr auto elem = static_cast<int64_t>(dtype_size(X));
  auto load = [&](int64_t i, int m) { return S::load_n(x + i * elem, X, m); };
  switch (kind) {
    case PartialKind::Sum:
      return row_sum<S>(n, load);
    case PartialKind::Max:
      return row_max<S>(n, load);
    case PartialKind::Min:
      return -row_max<S>(n, [&](int64_t i, int m) { return S::sub(S::zero(), load(i, m)); });
    case PartialKind::SquaredDeviation: {
      const F c = S::set1(static_cast<lane_t<S>>(center));
      return row_sum<S>(n, [&](int64_t i, int m) {
        const F d = S::sub(load(i, m), c);
        return S::mul(d, d);
      });
    }
  }
  return 0.0;
}

template <class S>
double reduce_partial(PartialKind kind, const void* data, DType t, int64_t n, double center) {
  double result = 0.0;
  with_load_dtype<S>(t, [&](auto x) {
    result = reduce_partial_typed<S, decltype(x)::value>(kind, static_cast<const char*>(data), n,
                                                         center);
  });
  return result;
}

template <class S>
constexpr ReduceKernels make_reduce_kernels() {
  return {kStripVectors * S::kWidth, &reduce_lines<S>, &reduce_partial<S>};
}

}  // namespace
}  // namespace mixprec::kernels::reduce_detail
