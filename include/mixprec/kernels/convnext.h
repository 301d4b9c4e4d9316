#pragma once
// The per-pixel half of a ConvNeXt-V2 block in two passes, for inference:
//
//   out = residual + project(GRN(GELU(expand(LayerNorm(x)))))
//
// over channels-last x [N, H, W, C] (the block's depthwise convolution output). Unfused, that is
// ten passes over the activations (LayerNorm, two GEMMs, GELU, four for GRN, the residual add),
// each rounding to the storage dtype; for the small channel counts of a detector network
// (PeakNet: 8-32) every one of them costs more per pixel in overhead than in arithmetic.
//
//   pass 1, per pixel: LayerNorm over C (f32 statistics, two passes over the pixel's channels)
//     -> expand [rC, C] + bias -> GELU (erf), all in f32 registers, rounded once to x's dtype
//     into a hidden buffer [N, HW, rC]; per channel the sum of squares of the rounded values
//     (GRN's statistic), summed per block of pixels and the blocks in a fixed order, so the
//     result does not depend on the thread count.
//   GRN folded into the projection per sample: y = h * f + beta with f = 1 + gamma R, so
//     project(y) = (W diag(f)) h + (W beta + b): no pass of its own.
//   pass 2, per pixel: the folded projection [C, rC] + bias + residual, rounded once into out.
//
// Dtypes: x, residual and out f32, bf16 or f16 (the same); parameters any float dtype, widened
// to f32 (the fold in f64). Differs from the unfused layers by their intermediate roundings
// only (the unfused path rounds after each op); no gradient.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

struct ConvNextMlpWeights {
  Tensor norm_weight, norm_bias;  // [C] (LayerNorm; undefined: 1 and 0)
  double norm_eps = 1e-6;
  Tensor expand_weight, expand_bias;  // [rC, C], [rC]
  Tensor grn_gamma, grn_beta;         // [rC]
  double grn_eps = 1e-6;
  Tensor project_weight, project_bias;  // [C, rC], [C]
};

// x, residual, out: [N, H, W, C] contiguous (out may not alias x; it may alias residual).
void convnext_mlp(const Tensor& x, const Tensor& residual, const ConvNextMlpWeights& weights,
                  const Tensor& out);

}  // namespace mixprec::kernels
