#pragma once
// Reductions over a list of dims: sum, mean, max, min, var.
//
// `dims` may be negative and in any order; an empty list reduces every dim (as x.sum() in
// PyTorch). With keepdim the reduced dims stay as size 1, else they are removed; `out` must
// have that shape. x is f32, f16, bf16 or f64 with any strides; out any of those dtypes.
//
// Numerics: every reduction accumulates in f32 (in f64 when x or out is f64) and rounds once,
// into out's dtype. Sums are blocked and pairwise: each f32 lane adds at most 64 terms in a
// row and partial sums meet in a binary tree, so the error grows like log2(n), not n (the sum
// of 100,000 bf16 ones is exactly 100,000). var is two-pass (the mean, then the squared
// deviations from it), so a large mean does not cancel the variance away. max and min
// propagate NaN. The summation order depends on the vector width, so the levels may differ
// by a few f32 roundings.
//
// Empty reductions: sum gives 0, mean and var NaN (0 / 0, as PyTorch); max and min of zero
// elements are an error (no identity).
#include <cstdint>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

void sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out);
void mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out);
void max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out);
void min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out);
// Sum of squared deviations over (n - 1) when unbiased, else over n; n <= 1 with unbiased
// gives 0 / 0 = NaN (as PyTorch).
void var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim,
         const Tensor& out);

// The shape of a reduction's result (what `out` must have); throws naming `op` for a dim out
// of range or repeated.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim,
                    const char* op);

}  // namespace mixprec::kernels
