#pragma once
// Differentiable convolution, pooling and upsampling front-ends over the kernels of the same
// names. The output keeps x's memory format (channels_last in, channels_last out).
#include <memory>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/resample.h"

namespace mixprec {

struct Conv2dParams {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

// x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] (optional) -> [N, O, OH, OW] in x's
// dtype. Gradients (in the operands' dtypes, f32 accumulation): dX by a convolution of dY with
// the flipped weight (stride 1; col2im otherwise), dW by dY^T x patches, db by a sum.
// residual (optional): out = conv + bias + residual, without a pass of its own where it can: of
// the output's shape and dtype (a residual block's skip connection) it is added in the
// convolution's epilogue, rounded once; one sample's per-channel offsets [1, O, 1, 1] (a time
// embedding) are added to the bias. Anything else add() takes is added after, as add().
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& p = {}, const Tensor& residual = Tensor());

// Inference with weights packed once (kernels::pack_conv_weights, for x's dtype as autocast
// leaves it): the same result as conv2d with the weights they were packed from, bit for bit,
// without packing them per call. Records no gradient: throws if x, bias or residual needs one.
// The packing is shared so that a graph capture can keep it for its replays.
Tensor conv2d(const Tensor& x, std::shared_ptr<const kernels::PackedConvWeights> weight,
              const Tensor& bias = Tensor(), const Conv2dParams& p = {},
              const Tensor& residual = Tensor());

// x [N, C, H, W] -> [N, C, H * scale, W * scale] (nearest or bilinear, half-pixel centres).
Tensor upsample(const Tensor& x, int64_t scale, kernels::UpsampleMode mode);
// Non-overlapping windows of `kernel` (stride = kernel, no padding): [N, C, H / k, W / k].
Tensor avg_pool2d(const Tensor& x, int64_t kernel);
Tensor max_pool2d(const Tensor& x, int64_t kernel);

// Motion compensation: x [N, C, H, W] sampled bilinearly at each pixel's position plus
// flow [N, 2, H, W] (pixels; channel 0 across, 1 down), positions clamped into the frame
// (kernels::warp2d). Computed in f32 (f64 for f64 x), returned in x's dtype and layout.
// Differentiable in x and in flow (the derivative through the sample position).
Tensor warp(const Tensor& x, const Tensor& flow);

}  // namespace mixprec
