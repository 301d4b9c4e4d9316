#pragma once
// Differentiable matrix products on the GEMM kernel (f32 accumulation, one rounding).
#include "mixprec/core/tensor.h"

namespace mixprec {

// a [..., M, K] x b [..., K, N] -> [..., M, N]; batch dims must match, or b is 2-D (shared).
// The result has the promoted dtype of a and b.
Tensor matmul(const Tensor& a, const Tensor& b);

// x [..., in] times weight [out, in] transposed, plus bias [out]: y [..., out] in x's dtype
// (the weight may be another float dtype; it is converted exactly while packing).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mixprec
