#pragma once
// What the loss front end (loss.cpp) and its per-level kernels share. Declarations only, no
// inline code: the ISA translation units include this.
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::loss_detail {

struct CrossEntropyPlan {
  const void* logits;  // [n, c], contiguous
  DType dtype;
  int64_t n, c;
  const int64_t* targets;  // [n], already checked to be in [0, c) or ignore_index
  int64_t ignore_index;
  double label_smoothing;
  double* losses;  // [n]; ignored rows get 0
};

// d loss / d logits: dx[i, j] = w_i (softmax(x_i)_j - goal_ij), goal the (smoothed) one-hot
// target; ignored rows are 0.
struct CrossEntropyGradPlan {
  CrossEntropyPlan rows;      // losses unused
  const double* row_weights;  // [n] w_i (reduction None), or null: every row `weight`
  double weight;
  void* dx;  // [n, c], contiguous
  DType dx_dtype;
};

struct LossKernels {
  // Rows [lo, hi) of the per-row losses.
  void (*cross_entropy)(const CrossEntropyPlan& plan, int64_t lo, int64_t hi);
  // Rows [lo, hi) of the gradient.
  void (*cross_entropy_grad)(const CrossEntropyGradPlan& plan, int64_t lo, int64_t hi);
  // Sum over i < n of (a[i] - b[i])^2, a and b contiguous.
  double (*squared_error_sum)(const void* a, DType a_dtype, const void* b, DType b_dtype,
                              int64_t n);
  // out[i] = (a[i] - b[i])^2 for i < n, all contiguous.
  void (*squared_error)(const void* a, DType a_dtype, const void* b, DType b_dtype, void* out,
                        DType out_dtype, int64_t n);
};

const LossKernels& loss_scalar();
const LossKernels& loss_avx2();
const LossKernels& loss_avx512();
const LossKernels& loss_f64();

}  // namespace mixprec::kernels::loss_detail
