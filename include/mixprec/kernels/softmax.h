#pragma once
// Softmax and log-softmax over one dim.
//
// x is f32, f16, bf16 or f64 with any strides; out has x's shape and any of those dtypes (it
// may be x itself). Inside, everything is f32 (f64 when x or out is f64): the row max is
// subtracted before exp, so no exp overflows (softmax of [10000, 0] in f16 is [1, 0]), the sum
// of exps is blocked pairwise (reduce.h), and each result is rounded once. log_softmax is
// (x - max) - log(sum), never log(softmax), so it stays exact for tiny probabilities.
//
// Special rows, as PyTorch: a row containing NaN or +inf gives NaN throughout; a row that is
// entirely -inf (every position masked) gives NaN throughout, for softmax and log_softmax,
// since its normaliser is 0 * inf. A -inf among finite values gives probability 0 (log -inf).
// Callers that want zeros for fully masked rows (attention) handle those rows themselves.
//
// The levels sum in different orders (vector width), so results may differ by an f32 rounding.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

void softmax(const Tensor& x, int64_t dim, const Tensor& out);
void log_softmax(const Tensor& x, int64_t dim, const Tensor& out);

}  // namespace mixprec::kernels
