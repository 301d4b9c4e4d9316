#pragma once
// Differentiable reductions, accumulated in f32 (f64 for f64) and rounded once into the
// input's dtype. `dims` empty means every dim.
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace mixprec
