#pragma once
// What the convolution driver (conv.cpp), its backward (conv_backward.cpp), its weight packing
// (conv_pack.cpp), the direct tiles (conv_direct_*.cpp) and the im2col walker share. Internal
// to src/kernels/cpu.
#include <cstdint>
#include <vector>

#include "../gemm/gemm_internal.h"
#include "conv_direct.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels::conv_detail {

// The geometry of one conv2d.
struct Geometry {
  int64_t n, c, h, w;                         // input
  int64_t o, kh, kw;                          // weight
  int64_t oh, ow;                             // output
  int64_t groups, cg, og;                     // channels per group in and out
  // h and w are x's upsampled by 2^scale_shift (Conv2dOptions::input_scale): input pixel
  // (iy, ix) is x's (iy >> scale_shift, ix >> scale_shift).
  int scale_shift = 0;
  int64_t k() const { return kh * kw * cg; }  // a patch row: (ky, kx, c) for the group's c
  int64_t m() const { return n * oh * ow; }   // output pixels
};

// The geometry of x [N, C, H, W] convolved with a weight of shape w_shape [O, C/groups, KH, KW]
// under `opt`, checked (conv.cpp).
Geometry geometry(const Tensor& x, const Shape& w_shape, const Conv2dOptions& opt);

// Calls visit(ky, kx, iy, ix) for each tap of the window of output pixel (oy, ox) that lies
// inside the image, in (ky, kx) order: the walk the depthwise kernel and col2im share.
template <class Visit>
void for_each_inside_tap(const Geometry& g, const Conv2dOptions& o, int64_t oy, int64_t ox,
                         Visit&& visit) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t iy = oy * o.stride_h - o.pad_h + ky * o.dilation_h;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * o.stride_w - o.pad_w + kx * o.dilation_w;
      if (ix >= 0 && ix < g.w) visit(ky, kx, iy, ix);
    }
  }
}

// Rows [p0, p1) of the patch (im2col) matrix of group `grp` into rows ([p1 - p0, K] row-major,
// x's dtype): row = output pixel (n, oy, ox), columns (ky, kx, c) for c in the group's
// channels, zeros where the window leaves the image. xs is [N, C, H, W] in channels_last memory
// (channel stride 1). Serial: callers split the pixels between threads. The forward gathers a
// tile of rows per thread for the GEMM, the backward chunks of rows for the dW GEMM
// (conv_patches.cpp).
void gather_patch_rows(const Tensor& xs, const Conv2dOptions& opt, const Geometry& g, int64_t grp,
                       int64_t p0, int64_t p1, void* rows);

// The fused epilogue of one group, turned into a tile's by tile_epilogue.
struct GroupOutput {
  const Tensor& ys;        // NHWC output, pixels ldc elements apart (a channel slice: ldc > o)
  const Tensor* bias;      // contiguous [O] or null
  const Tensor* residual;  // NHWC or null
  Activation activation;
  int64_t o, col0;  // all output channels; the group's first
  int64_t ldc;      // ys's pixel stride
};

// The epilogue of output pixel `pixel`, columns from `col` of the group.
gemm_detail::TileEpilogue tile_epilogue(const GroupOutput& out, int64_t pixel, int64_t col);

// Weights of every group packed as GEMM B [K = KH*KW*Cg, Og], rows in gather order (ky, kx, c),
// for A of dtype x_dtype (conv_pack.cpp).
std::vector<PackedMatrix> pack_groups(const Tensor& weight, DType x_dtype, const Geometry& g);

// Direct convolution of group `grp` on NHWC xs (the direct driver in conv.cpp).
void run_direct(const DirectKernel& dk, const Tensor& xs, const PackedMatrix& b,
                const Conv2dOptions& opt, const Geometry& g, int64_t grp, const GroupOutput& out);

}  // namespace mixprec::kernels::conv_detail
