#pragma once
// A 1x1 convolution with few channels (conv.cpp's pointwise_small_takes: PeakNet's laterals and
// head, 2-32 channels) over one block of pixels, written once over a SIMD lane type S
// (simd_scalar.h's interface): the scalar level is the reference. Like convnext_mlp's passes it
// runs vectors over pixels, not channels: the block is transposed into f32 [channel][pixel] rows
// (layout/pixel_rows.h), each output channel is a sum of input rows times broadcast weights, and the
// rows are transposed back with one rounding. The GEMM would pack the pixels into panels and run
// tiles of 2-32 columns for K = 2-32: mostly overhead.
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "../layout/pixel_rows.h"

namespace mixprec::kernels::conv_detail {

constexpr int64_t kPointwiseBlock = 256;  // pixels per block (a multiple of every lane count)

struct PointwiseBlock {
  const void* x;  // [pixels][in] in x_dtype
  DType x_dtype;
  void* out;  // [pixels][out] in out_dtype
  DType out_dtype;
  int64_t pixels, in, out_channels;
  const float* weight;  // [out][in]
  const float* bias;    // [out]
  float* scratch;       // [in + out][kPointwiseBlock] f32, then [max(in, out)][kPointwiseBlock]
                        // of the storage dtypes
};
using PointwiseBlockFn = void(const PointwiseBlock&);
void pointwise_block_scalar(const PointwiseBlock& a);
void pointwise_block_avx2(const PointwiseBlock& a);
void pointwise_block_avx512(const PointwiseBlock& a);

template <class S>
void pointwise_block(const PointwiseBlock& a) {
  using F = typename S::F;
  constexpr int64_t kW = S::kWidth, kB = kPointwiseBlock;
  const int64_t c = a.in, o = a.out_channels, np = a.pixels;
  float* xt = a.scratch;           // [in][kB]
  float* ot = a.scratch + c * kB;  // [out][kB]
  float* tmp = ot + o * kB;
  layout_detail::rows_from_pixels(a.x, a.x_dtype, np, c, xt, kB, tmp);
  for (int64_t p = 0; p < np; p += kW)
    for (int64_t j = 0; j < o; ++j) {
      const float* wj = a.weight + j * c;
      F acc = S::set1(a.bias[j]);
      for (int64_t k = 0; k < c; ++k) acc = S::fmadd(S::set1(wj[k]), S::load(xt + k * kB + p), acc);
      S::store(ot + j * kB + p, acc);
    }
  layout_detail::pixels_from_rows(ot, kB, np, o, a.out, a.out_dtype, tmp);
}

}  // namespace mixprec::kernels::conv_detail
