#pragma once
// 2-D convolution over the GEMM: stride, padding, dilation, groups (depthwise included), NCHW
// or NHWC (channels_last) tensors, f32/bf16/f16 in any mix, f32 accumulation, fused epilogue
// (bias, activation, residual add, output cast) rounded once on the final write.
//
// Layout: the kernels work in NHWC. A 1x1 convolution with stride 1 and no padding is one GEMM
// over the input as it lies (no copy). Other shapes, on the AVX-512 levels, run a direct
// convolution: a micro-kernel whose A operand is read in place from the NHWC input, one tap at
// a time, with zeros where the window leaves the image; f32 inputs directly, bf16 inputs on
// AMX tiles (channels per group a multiple of 32, at the amx level), through vdpbf16ps
// (even channel count per group) or widened to f32 once per call (Bf16ConvCompute in
// core/dispatch.h), f16 inputs widened to f32. AVX2 and scalar gather patches of a tile of
// output pixels (im2col, a few hundred rows at a time, per thread) for the GEMM. Weights are
// packed per call, or once by pack_conv_weights (which nn::Conv2d does for inference). NCHW
// operands are converted to NHWC on the way in and out.
#include <cstdint>
#include <vector>

#include "mixprec/core/dispatch.h"
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
  // x [N, C, H, W] is read as its nearest-neighbour upsampling by this factor (a power of two),
  // [N, C, H * s, W * s], without making it: an upsample followed by a convolution, fused (a
  // graph pass does it). Packed convolutions only (conv2d_runs_packed).
  int64_t input_scale = 1;
};

// Output size of one spatial dim (PyTorch's formula); throws if it would be < 1.
int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad,
                         int64_t dilation);

// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] or null, out [N, O, OH, OW].
void conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
            const Conv2dOptions& options = {});

// The gradients of conv2d (without its epilogue: bias, activation and residual are the
// caller's) from grad_out (out's shape, any dtype, any layout). The GEMMs run on the operands
// in their own dtypes (bf16 stays bf16: vdpbf16ps), accumulate in f32 and round once into each
// gradient; when x, weight or grad_out is f64 every operand runs in f64 (gradient checks).
//   input:  x's shape, dtype and memory format; stride 1 (padding at most the dilated kernel
//           extent) as a convolution of grad_out with the flipped, transposed weight, otherwise
//           per chunk of pixels dCols = dY W_g added back into dX (col2im) in f32.
//   weight: the weight's shape and dtype; per chunk of pixels dW_g += dY_g^T Cols in f32.
//   bias:   [O] in `bias_dtype`, f32 sums of grad_out per channel and chunk, added in f64.
struct Conv2dGradRequest {
  bool input = true, weight = true, bias = false;
  DType bias_dtype = DType::F32;
};
struct Conv2dGrads {
  Tensor input, weight, bias;  // undefined where not requested
};
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                            const Conv2dOptions& options, const Conv2dGradRequest& request);
// The same into given tensors: each defined one of `into` is a gradient asked for (input: x's
// shape, any float dtype and layout; weight: the weight's shape; bias: [O]), written once.
void conv2d_backward_into(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                          const Conv2dOptions& options, const Conv2dGrads& into);

// Weights packed once for inputs of one dtype at the active kernel level and bf16 mode
// (inference: the packing is a snapshot; pack again after changing the weights, the level or
// DispatchConfig::bf16_conv).
class PackedConvWeights {
 public:
  PackedConvWeights() = default;
  bool defined() const { return !shape_.empty(); }
  const Shape& shape() const { return shape_; }
  int64_t groups() const { return groups_; }
  DType x_dtype() const { return x_dtype_; }
  DType weight_dtype() const { return weight_dtype_; }
  std::size_t bytes() const;  // memory held: the panels, or the copy depthwise and f64 read

 private:
  friend PackedConvWeights pack_conv_weights(const Tensor& weight, DType x_dtype, int64_t groups);
  friend void conv2d(const Tensor& x, const PackedConvWeights& weight, const Tensor* bias,
                     const Tensor& out, const Conv2dOptions& options);
  // Only depthwise and f64 keep a copy of the weights (they read them as they are); the
  // others hold just the panels, so a packing costs about one more copy of the weights.
  Tensor weight_;
  std::vector<PackedMatrix> packed_;  // per group: B [KH*KW*Cg, Og] in (ky, kx, c) order
  Shape shape_;                       // [O, C / groups, KH, KW]
  DType weight_dtype_ = DType::F32;
  int64_t groups_ = 1;
  DType x_dtype_ = DType::F32;
  DType pack_dtype_ = DType::F32;  // the A dtype the GEMM packing was made for
  IsaLevel level_ = IsaLevel::Scalar;
};

PackedConvWeights pack_conv_weights(const Tensor& weight, DType x_dtype, int64_t groups = 1);

// Whether conv2d with these weights and options runs on the packed GEMM panels (not depthwise,
// the few-channel 1x1 or f64): the paths that take Conv2dOptions::input_scale > 1 and write
// straight into an output that is a channel slice of a channels_last tensor (strides
// [P*H*W, 1, P*W, P]); the others write such an output through a temporary.
bool conv2d_runs_packed(const PackedConvWeights& weight, const Conv2dOptions& options);

// As conv2d with the weights packed by pack_conv_weights; options.groups must match theirs and
// x must have the dtype they were packed for.
void conv2d(const Tensor& x, const PackedConvWeights& weight, const Tensor* bias, const Tensor& out,
            const Conv2dOptions& options = {});

}  // namespace mixprec::kernels
