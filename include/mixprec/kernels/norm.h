#pragma once
// Normalisation kernels: LayerNorm, RMSNorm and GroupNorm (with a fused activation, for the
// U-Net's GroupNorm + SiLU).
//
// Dtypes: x, out, weight and bias are each f32, f16, bf16 or f64, mixed freely (bf16
// activations with f32 norm parameters is the usual half-precision model). Statistics are
// computed in f32 (in f64 when any of the tensors is f64) by two passes over the data, a
// pairwise sum for the mean and then one of the squared deviations from it, so a large mean
// does not cancel the variance (E[x^2] - E[x]^2 would). The output is
// (x - mean) * (rstd * weight) + bias, rounded once. Weight and bias are optional: pass an
// undefined Tensor() to leave them out.
//
// Layouts: any strides (non-contiguous inputs are copied first). GroupNorm runs NCHW and
// channels_last (NHWC strides) natively: a channels_last x is normalised in place in its
// layout, with per-channel sums down the HW rows.
//
// The levels sum the statistics in different orders (vector width), so results may differ by
// a few f32 roundings between them.
//
// Statistics outputs (for a backward pass): mean and rstd = 1 / sqrt(var + eps), with var the
// biased variance, are written when the NormStats tensors are defined, each in its own dtype.
#include <cstdint>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"  // Activation

namespace mixprec::kernels {

struct NormStats {
  Tensor
      mean;  // LayerNorm: x's leading dims (x.shape minus the normalized dims); GroupNorm: [N, G]
  Tensor rstd;  // the same shape
};

// Normalises over the trailing dims given by normalized_shape (they must equal x's last dims).
// weight and bias have shape normalized_shape.
void layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps, const Tensor& out, const NormStats& stats = {});

// out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) over the trailing dims (no centring,
// no bias). stats.mean, if given, receives mean(x^2).
void rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps,
              const Tensor& out, const NormStats& stats = {});

// x [N, C, *spatial] (NCHW, or channels_last for 4-D), C divisible by `groups`; weight and bias
// [C]; out has x's shape. `activation` is applied after the affine step, in the same pass.
void group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                double eps, const Tensor& out, Activation activation = Activation::None,
                const NormStats& stats = {});

}  // namespace mixprec::kernels
