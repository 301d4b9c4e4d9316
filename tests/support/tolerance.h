#pragma once
// The one tolerance table for kernel tests, keyed by output dtype.
//
// A kernel that accumulates n terms in f32 and rounds once to dtype D may differ from the f64
// reference by (a) the rounding of the final write, at most half an ulp of D, i.e.
// 2^-(mantissa_bits(D) + 1) relative, and (b) f32 accumulation error, at most
// n * 2^-24 * sum|terms| (the classic gamma_n bound; in practice ~sqrt(n) of that), plus
// (c) the vectorised transcendental functions' error (exp, sigmoid, erf: <= 2e-7 absolute,
// scaled by the value's magnitude). `bound` adds the three, with a factor 2 of headroom.
#include <cmath>
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::test_support {

struct Tolerance {
  double rounding;  // relative, of |reference|
  double per_term;  // times n * sum|terms|
  double function;  // absolute, times (1 + |reference|)

  double bound(double reference, int64_t n, double abs_sum) const {
    return 2.0 * (rounding * std::fabs(reference) + per_term * static_cast<double>(n) * abs_sum +
                  function * (1.0 + std::fabs(reference)));
  }
};

inline Tolerance tolerance_for(DType out) {
  const double half_ulp = std::ldexp(1.0, -(info(out).mantissa_bits + 1));
  return {half_ulp, std::ldexp(1.0, -24), 2e-7};
}

// The same table for a kernel that computes in `compute`: F32 (the table above), or F64 (the
// f64 path of the non-GEMM kernels, which accumulates in f64 and takes its functions from the
// C library, within a few f64 ulps): there the accumulation and function terms shrink to f64's.
inline Tolerance tolerance_for(DType out, DType compute) {
  Tolerance t = tolerance_for(out);
  if (compute == DType::F64) {
    t.per_term = std::ldexp(1.0, -53);
    t.function = 1e-15;
  }
  return t;
}

// The n to give bound() for a sum that the reduction kernels (reductions, softmax, norms,
// losses) compute by blocked pairwise summation: each f32 lane adds at most 64 terms in a row
// and the partial sums then meet in a binary tree, so the worst-case error grows like
// (64 + log2 n) roundings rather than n. The 2 log2 n leaves room for the vector-lane and
// thread-chunk combining steps.
inline int64_t pairwise_terms(int64_t n) {
  const int64_t tree =
      n <= 1 ? 0 : static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(n))));
  return n < 64 + 2 * tree ? n : 64 + 2 * tree;
}

}  // namespace mixprec::test_support
