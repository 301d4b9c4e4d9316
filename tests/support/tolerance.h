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
  double rounding;   // relative, of |reference|
  double per_term;   // times n * sum|terms|
  double function;   // absolute, times (1 + |reference|)

  double bound(double reference, int64_t n, double abs_sum) const {
    return 2.0 * (rounding * std::fabs(reference) + per_term * static_cast<double>(n) * abs_sum +
                  function * (1.0 + std::fabs(reference)));
  }
};

inline Tolerance tolerance_for(DType out) {
  const double half_ulp = std::ldexp(1.0, -(info(out).mantissa_bits + 1));
  return {half_ulp, std::ldexp(1.0, -24), 2e-7};
}

}  // namespace mixprec::test_support
