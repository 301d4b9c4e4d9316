#pragma once
// Differentiable activations (forward on the elementwise kernels, f32 math, one rounding).
#include "mixprec/core/tensor.h"

namespace mixprec {

enum class GeluApproximation { None, Tanh };  // erf form, or PyTorch's approximate="tanh"

Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::None);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace mixprec
