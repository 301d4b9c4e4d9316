#pragma once
// What a convolution and its backward share: the geometry of one conv2d and the im2col walker
// that gathers its patch rows. The forward gathers a tile of rows per thread for the GEMM
// (kernels/conv.h); the backward gathers chunks of rows for the dW GEMM (ops/conv.cpp).
#include <cstdint>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/conv.h"

namespace mixprec::kernels {

struct ConvGeometry {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight
  int64_t oh, ow;          // output
  int64_t groups, cg, og;  // channels per group in and out
  int64_t k() const { return kh * kw * cg; }  // a patch row: (ky, kx, c) for the group's c
  int64_t m() const { return n * oh * ow; }   // output pixels
};

// Rows [p0, p1) of the patch (im2col) matrix of group `grp` into rows ([p1 - p0, K] row-major,
// x's dtype): row = output pixel (n, oy, ox), columns (ky, kx, c) for c in the group's
// channels, zeros where the window leaves the image. xs is [N, C, H, W] in channels_last memory
// (channel stride 1). Serial: callers split the pixels between threads.
void gather_patch_rows(const Tensor& xs, const Conv2dOptions& opt, const ConvGeometry& g,
                       int64_t grp, int64_t p0, int64_t p1, void* rows);

}  // namespace mixprec::kernels
