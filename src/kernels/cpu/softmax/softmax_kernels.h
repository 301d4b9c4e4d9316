#pragma once
// What the softmax front end (softmax.cpp) and its per-level kernels share. Declarations only,
// no inline code: the ISA translation units include this. The plan is the one of reductions
// (reduce_kernels.h): x[outer][len][inner] normalised over `len`.
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::softmax_detail {

struct SoftmaxPlan {
  const void* x;  // [outer, len, inner], contiguous
  DType x_dtype;
  void* out;  // [outer, len, inner], contiguous; may be x
  DType out_dtype;
  int64_t outer, len, inner;
  bool log;  // log_softmax
};

struct SoftmaxKernels {
  int strip_width;  // columns per unit when inner > 1
  // Units [lo, hi): rows when inner == 1, else (outer, strip) pairs, unit = o * strips + s.
  void (*lines)(const SoftmaxPlan& plan, int64_t lo, int64_t hi);
};

const SoftmaxKernels& softmax_scalar();
const SoftmaxKernels& softmax_avx2();
const SoftmaxKernels& softmax_avx512();
const SoftmaxKernels& softmax_f64();

}  // namespace mixprec::kernels::softmax_detail
