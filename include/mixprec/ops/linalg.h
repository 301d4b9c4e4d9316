#pragma once
// Differentiable matrix products on the GEMM kernel (f32 accumulation, one rounding).
#include <memory>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec {

// a [..., M, K] x b [..., K, N] -> [..., M, N]; batch dims must match, or b is 2-D (shared).
// The result has the promoted dtype of a and b.
Tensor matmul(const Tensor& a, const Tensor& b);

// x [..., in] times weight [out, in] transposed, plus bias [out]: y [..., out] in x's dtype
// (the weight may be another float dtype; it is converted exactly while packing).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// weight [out, in] packed once as the GEMM's B = weight^T for inputs of dtype x_dtype (f32, f16
// or bf16; the dtype x has after autocast), for the linear below.
kernels::PackedMatrix pack_linear_weight(const Tensor& weight, DType x_dtype);

// Inference with the weight packed once: the same result as linear with the weight it was
// packed from, bit for bit, without packing it per call. Records no gradient: throws if x or
// bias needs one. The packing is shared so that a graph capture can keep it for its replays.
Tensor linear(const Tensor& x, std::shared_ptr<const kernels::PackedMatrix> weight,
              const Tensor& bias = Tensor());

}  // namespace mixprec
