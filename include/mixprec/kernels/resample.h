#pragma once
// Pooling and upsampling over [N, C, H, W] tensors in any layout (NCHW or channels_last
// through strides), f32/bf16/f16 computed in f32 (f64 in f64, for gradient checks) and rounded
// once into out's dtype.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

struct Pool2dOptions {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 0, stride_w = 0;  // 0: the kernel size
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling divides by the full window (PyTorch default)
};

// Output size of a pooling window along one dim (floor mode, as PyTorch's default).
int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad);

void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dOptions& options = {});
// NaN propagates (a window holding a NaN gives NaN). `indices`, when given (i64, out's shape),
// receives the flat h * W + w position of each maximum, for the backward pass.
void max_pool2d(const Tensor& x, const Tensor& out, const Pool2dOptions& options = {},
                const Tensor* indices = nullptr);

enum class UpsampleMode : uint8_t { Nearest, Bilinear };

// Resizes x [N, C, H, W] to out [N, C, OH, OW]: nearest (PyTorch's "nearest": src = floor(dst *
// in / out)) or bilinear with align_corners = false (half-pixel centres). 2x is the common case.
void upsample2d(const Tensor& x, const Tensor& out, UpsampleMode mode);

// Backward warping (motion compensation): out(n, c, y, x) = x(n, c) sampled bilinearly at
// (x + flow(n, 0, y, x), y + flow(n, 1, y, x)), flow in pixels (channel 0 across, 1 down),
// sample positions clamped into the frame (edge pixels replicated). x [N, C, H, W] f32/bf16/f16/
// f64, flow [N, 2, H, W] and out [N, C, H, W] in x's accumulation dtype (f64 for f64 x, else
// f32); any layout. A zero flow reproduces x exactly.
void warp2d(const Tensor& x, const Tensor& flow, const Tensor& out);

// The adjoints of warp2d for `grad` [N, C, H, W]: dx (x's shape) receives, added to what it holds,
// each output gradient spread over its four bilinear neighbours; dflow [N, 2, H, W] is set to the
// derivative through the sample position (0 where the position was clamped). grad, dx and dflow
// in the accumulation dtype.
void warp2d_backward(const Tensor& grad, const Tensor& x, const Tensor& flow, const Tensor& dx,
                     const Tensor& dflow);

}  // namespace mixprec::kernels
