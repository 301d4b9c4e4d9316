#pragma once
// 2-D convolution over the GEMM: stride, padding, dilation, groups (depthwise included), NCHW
// or NHWC (channels_last) tensors, f32/bf16/f16 in any mix, f32 accumulation, fused epilogue
// (bias, activation, residual add, output cast) rounded once on the final write.
//
// Layout: the kernels work in NHWC. A 1x1 convolution with stride 1 and no padding is one GEMM
// over the input as it lies (no copy); other shapes gather patches of a tile of output pixels
// (im2col, a few hundred rows at a time, per thread) and multiply by weights packed once per
// call. NCHW operands are converted to NHWC on the way in and out.
#include <cstdint>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  Activation activation = Activation::None;
  const Tensor* residual = nullptr;  // added after the activation; out's shape
};

// Output size of one spatial dim (PyTorch's formula); throws if it would be < 1.
int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad,
                         int64_t dilation);

// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] or null, out [N, O, OH, OW].
void conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
            const Conv2dOptions& options = {});

}  // namespace mixprec::kernels
