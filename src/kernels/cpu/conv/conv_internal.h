#pragma once
// What the convolution driver (conv.cpp), its weight packing (conv_pack.cpp) and its direct
// driver (conv_direct.cpp) share. Internal to src/kernels/cpu.
#include <cstdint>
#include <vector>

#include "conv_direct.h"
#include "../gemm/gemm_internal.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/conv_patches.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels::conv_detail {

using Geometry = ConvGeometry;  // kernels/conv_patches.h

// The fused epilogue of one group, turned into a tile's by tile_epilogue.
struct GroupOutput {
  const Tensor& ys;        // NHWC output
  const Tensor* bias;      // contiguous [O] or null
  const Tensor* residual;  // NHWC or null
  Activation activation;
  int64_t o, col0;  // all output channels; the group's first
};

// The epilogue of output pixel `pixel`, columns from `col` of the group.
gemm_detail::TileEpilogue tile_epilogue(const GroupOutput& out, int64_t pixel, int64_t col);

// Weights of every group packed as GEMM B [K = KH*KW*Cg, Og], rows in gather order (ky, kx, c),
// for A of dtype x_dtype (conv_pack.cpp).
std::vector<PackedMatrix> pack_groups(const Tensor& weight, DType x_dtype, const Geometry& g);

// Direct convolution of group `grp` on NHWC xs (conv_direct.cpp).
void run_direct(const DirectKernel& dk, const Tensor& xs, const PackedMatrix& b,
                const Conv2dOptions& opt, const Geometry& g, int64_t grp, const GroupOutput& out);

}  // namespace mixprec::kernels::conv_detail
