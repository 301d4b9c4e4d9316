#pragma once
// Backward kernels of LayerNorm, RMSNorm and GroupNorm (+ fused SiLU). With xhat = (x - mean)
// rstd over one normalised group of M elements (x rstd for RMSNorm), g' = dL/dy (times the
// fused activation's derivative at y = xhat w + b) and gy = g' w:
//   dx      = rstd (gy - mean(gy) - xhat mean(gy xhat))      LayerNorm, GroupNorm
//   dx      = rstd (gy - xhat mean(gy xhat))                  RMSNorm
//   dweight = sum g' xhat,  dbias = sum g'                    over everything but the channel
//
// The statistics are the forward's (NormStats of kernels/norm.h: mean, or mean(x^2) for RMSNorm,
// and rstd, f32 or f64), so the backward sees exactly the xhat the forward used. Sums run in f32
// (f64 when x or grad is f64), per-group sums pairwise, parameter sums in f32 blocks combined in
// f64 in a fixed order (the same for any thread count); each output is rounded once into its
// own dtype.
//
// Layouts: dx has x's shape and is written in its own layout; GroupNorm works natively on NCHW
// and on channels_last x (vectorised across channels), LayerNorm on rows of the trailing dims.
// Outputs that are undefined Tensors are not computed.
#include <cstdint>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/norm.h"

namespace mixprec::kernels {

struct NormGrads {
  Tensor dx;       // x's shape
  Tensor dweight;  // weight's shape
  Tensor dbias;    // bias's shape
};

// LayerNorm (rms = false) or RMSNorm (rms = true) over the trailing normalized_shape dims.
// out.dbias (normalized_shape), when defined, receives the bias gradient sum(grad).
void layer_norm_backward(const Tensor& x, const Tensor& grad, const Shape& normalized_shape,
                         const Tensor& weight, bool rms, const NormStats& stats,
                         const NormGrads& out);

// GroupNorm of x [N, C, *spatial]; `activation` (None or SiLU) is the forward's fused one,
// which needs bias (or none) to recompute y.
void group_norm_backward(const Tensor& x, const Tensor& grad, int64_t groups, const Tensor& weight,
                         const Tensor& bias, Activation activation, const NormStats& stats,
                         const NormGrads& out);

}  // namespace mixprec::kernels
