#pragma once
// Differentiable normalisation, softmax, losses, embedding, dropout and concatenation.
// Statistics, softmax and losses run in f32 whatever the input dtype (DESIGN.md section 1);
// backward passes accumulate in f32 (f64 for f64) and round once into each gradient's dtype.
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/loss.h"

namespace mixprec {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Over the trailing dims `normalized_shape`; weight/bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                double eps = 1e-6);
// x [N, C, *], weight/bias [C]; `activation` (None or SiLU) fused after the affine step.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5,
                  kernels::Activation activation = kernels::Activation::None);

// logits [N, C], targets [N] (i64/i32): f32 loss (f64 for f64 logits), [] or [N] for None.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     kernels::Reduction reduction = kernels::Reduction::Mean,
                     const kernels::CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& a, const Tensor& b,
                kernels::Reduction reduction = kernels::Reduction::Mean);

// weight [V, D], indices any shape (i64/i32) -> [..., D] in weight's dtype.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen = default_generator());

// Joins tensors of one dtype along `dim` (every other dim equal).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);

// For each i, slice index[i] of `self` along `dim` takes slice i of `source` (PyTorch's
// index_copy_): a KV cache written at a position held in a tensor, which a graph replay reads
// anew each time. index: 1-D i64 or i32; source: self's dtype and shape but index.numel() along
// dim. The indices are checked when the copy runs (out of range: an Error, nothing written).
// In place and not differentiable: self must not require gradients. Returns self.
const Tensor& index_copy_(const Tensor& self, int64_t dim, const Tensor& index,
                          const Tensor& source);

}  // namespace mixprec
