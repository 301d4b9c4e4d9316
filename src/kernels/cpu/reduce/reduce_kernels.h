#pragma once
// What the reduction front end (reduce.cpp) and its per-level kernels share. Declarations
// only, no inline code: the ISA translation units include this.
//
// Every reduction is planned as a contiguous block x[outer][len][inner] reduced over `len`
// into out[outer][inner]. inner == 1 is the row case (vectors along the reduced elements,
// horizontal sum at the end); inner > 1 the column case (vectors across `inner`, each lane
// its own sum), taken in strips of strip_width() columns.
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::reduce_detail {

enum class ReduceKind : uint8_t { Sum, Mean, Max, Min, Var };

struct ReducePlan {
  ReduceKind kind;
  const void* x;  // [outer, len, inner], contiguous
  DType x_dtype;
  int64_t outer, len, inner;
  void* out;  // [outer, inner], contiguous
  DType out_dtype;
  double correction;  // Var: the divisor is max(0, len - correction)
};

// What a contiguous run of n elements contributes to a reduction split across threads.
enum class PartialKind : uint8_t {
  Sum,
  Max,               // NaN if any element is NaN; -inf for n == 0
  Min,               // NaN if any element is NaN; +inf for n == 0
  SquaredDeviation,  // sum of (x - center)^2
};

struct ReduceKernels {
  int strip_width;  // columns per unit in the column case
  // Units [lo, hi): rows of the row case, or (outer, strip) pairs of the column case
  // (unit = o * strips + s).
  void (*lines)(const ReducePlan& plan, int64_t lo, int64_t hi);
  double (*partial)(PartialKind kind, const void* x, DType dtype, int64_t n, double center);
};

const ReduceKernels& reduce_scalar();
const ReduceKernels& reduce_avx2();
const ReduceKernels& reduce_avx512();
const ReduceKernels& reduce_f64();

}  // namespace mixprec::kernels::reduce_detail
