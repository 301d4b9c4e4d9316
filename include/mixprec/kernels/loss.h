#pragma once
// Losses: cross-entropy over class logits, and mean squared error.
//
// Numerics: computed in f32 whatever the input dtype (in f64 when an input is f64), through
// log-softmax with the row max subtracted (so bf16/f16 logits of any size are safe); per-row
// results are combined in f64 for the mean and sum reductions. The loss tensor is f32 (f64
// when an input is f64): a loss never comes back in 16 bits. The levels sum in different
// orders (vector width), so results may differ by a few f32 roundings between them.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

enum class Reduction : uint8_t { None, Mean, Sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;   // rows with this target add nothing and are not counted
  double label_smoothing = 0.0;  // in [0, 1]: the target is (1 - s) one-hot + s / C uniform
};

// logits [N, C] in any float dtype and strides; targets [N] i64 or i32 class indices in
// [0, C) (or ignore_index; anything else is an error naming the row). out: [] for Mean and
// Sum, [N] for None (ignored rows give 0). Mean divides by the number of rows not ignored, as
// PyTorch (all rows ignored: 0 / 0 = NaN).
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& out,
                   const CrossEntropyOptions& options = {});

// The gradient of cross_entropy with the same options, given the loss's incoming gradient
// `grad` ([] for Mean and Sum, [N] for None): dx[i, j] = w_i (softmax(logits_i)_j - goal_ij),
// goal the (smoothed) one-hot target, w_i = grad (divided by the rows counted for Mean; per row
// for None); ignored rows are exactly 0, whatever their logits. Computed in f32 (f64 when logits
// or dx is f64) and rounded once into dx [N, C], contiguous, of any float dtype; dx may be the
// logits themselves.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                            const Tensor& dx, const CrossEntropyOptions& options = {});

// (a - b)^2, a and b of the same shape (any float dtypes and strides). out: [] for Mean and
// Sum, a's shape for None.
void mse_loss(const Tensor& a, const Tensor& b, const Tensor& out,
              Reduction reduction = Reduction::Mean);

}  // namespace mixprec::kernels
