#pragma once
// Embedding lookup: out[p, :] = weight[indices[p], :] for every position p of `indices`.
//
// weight [V, D] is f32, f16, bf16 or f64 with any strides; indices are i64 or i32 of any shape
// (0-d included); out has shape indices.shape + [D] and any float dtype: rows are copied as is
// when the dtypes match, else converted by the conversion kernel (round to nearest even, once).
// Every index must lie in [0, V); the first one that does not is reported with its position,
// before anything is written. Rows are plain data movement, so there is no per-level variant
// beyond the conversion kernel's own.
#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out);

}  // namespace mixprec::kernels
