#pragma once
// Direct ("implicit GEMM") convolution tiles: the micro-kernel reads its A operand straight
// from the NHWC input instead of from an im2col matrix packed per tile. One tile is MR output
// pixels of one output row times one nr-column panel of the weights packed by pack_b (B is
// [K = KH*KW*Cg, Og] in (ky, kx, c) order, so tap t's rows start at t * Cg). For tap t and pixel
// i the tile reads the Cg channels at a_rows[t * kDirectMaxMr + i]: the input pixel under the
// tap, or a zeroed row where the window leaves the image (padding). Per k (or k pair for
// bf16) that is one broadcast per pixel and nr / 16 vector loads of B for MR * nr / 16 FMAs,
// the same ratio as the GEMM tile, without the gather and pack passes.
#include <cstddef>
#include <cstdint>

#include "../gemm/gemm_internal.h"

namespace mixprec::kernels::conv_detail {

constexpr int kDirectMaxMr = 14;  // pixels per tile (the GEMM tile's height)

struct DirectArgs {
  int taps;                   // taps with at least one pixel inside the image
  const void* const* a_rows;  // [taps][kDirectMaxMr] start of the group's channels
  const int* tap_index;       // [taps] tap number ky * KW + kx of each
  const void* b_panel;        // one packed B panel (all of K)
  std::size_t b_tap_bytes;    // bytes of one tap's Cg rows in the panel
  int64_t cg;                 // channels per tap (even for bf16 compute)
};

// Computes MR (= index + 1) pixels x nr_eff columns, then the GEMM epilogue.
using DirectTileFn = void(const DirectArgs& args, int nr_eff, const gemm_detail::TileEpilogue& ep);

struct DirectKernel {
  int nr;
  DType compute;               // F32: f32 input and weights; BF16: bf16 input, Cg even
  DirectTileFn* const* tiles;  // tiles[m - 1] handles m pixels, 1 <= m <= kDirectMaxMr
};

// Null when the level has no direct kernel for this compute dtype (AVX2 and scalar use
// im2col tiles).
const DirectKernel* direct_kernel_avx512();      // f32
const DirectKernel* direct_kernel_avx512bf16();  // bf16

// ---- depthwise rows (conv.cpp: the scalar reference; conv_depthwise_avx512.cpp) ----
// One output row of a depthwise convolution over NHWC f32: out[ox * C + c] = bias[c] +
// sum over (ky, kx) of rows[ky][ix * C + c] * weight[(ky * KW + kx) * C + c], ix = ox * stride
// - pad + kx * dilation (the horizontal parameters; the caller picks the rows), taps outside
// the row (ix) or the image (rows[ky] null) skipped.
// With shared_input, the input has one channel that every output channel reads (a convolution
// of a one-channel image, e.g. a detector frame: depthwise with a channel multiplier of C):
// rows[ky][ix] in place of rows[ky][ix * C + c].
struct DepthwiseRow {
  const float* const* rows;  // [KH] the input row under each kernel row, or null
  const float* weight;       // [KH][KW][C]
  const float* bias;         // [C]
  int64_t channels, in_width, out_width, kernel_h, kernel_w, stride, pad, dilation;
  bool shared_input = false;
};
using DepthwiseRowFn = void(const DepthwiseRow& row, float* out);
void depthwise_row_scalar(const DepthwiseRow& row, float* out);
void depthwise_row_avx512(const DepthwiseRow& row, float* out);

// ---- AMX-BF16 (conv_direct_amx.cpp) ----
// The same direct convolution on AMX tiles: A tiles are 16 output pixels of one output row x 32
// input channels loaded in place (row stride = the input's pixel stride), B tiles are 16 k
// pairs x 16 columns of the bf16 GEMM panels (nr = 32, read with a 128-byte row stride),
// 2 x 2 tiles of 16 x 16 f32 accumulators. Each thread copies the input rows it reads, with a
// zero border, into a small ring of rows as it goes, so every tap of every segment is one
// strided tile load.

struct AmxConvProblem {
  const uint16_t* x;                           // NHWC bf16, at the group's first channel
  int64_t x_stride_n, x_stride_h, x_stride_w;  // elements
  int64_t n, h, w, cg;                         // cg a multiple of 32; h, w upsampled
  int scale_shift;  // x is read nearest-upsampled by 2^scale_shift (Conv2dOptions::input_scale)
  int64_t kh, kw, oh, ow;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  const void* b_panels;  // bf16 GEMM panels of B [KH*KW*Cg, Og], 32 columns each
  int64_t og;
  // The epilogue of output pixel 0, column 0. Output pixel `pixel` (n * OH * OW + oy * OW +
  // ox), column `col` is at (pixel * ldc + col) elements of C from it (residual_ld for the
  // residual, col for the bias), so a block's epilogue is a few pointer additions.
  gemm_detail::TileEpilogue epilogue;
};

void amx_conv(const AmxConvProblem& p);

// ---- weight packing (conv_pack_avx512.cpp) ----
// One 32-column bf16 panel of OIHW bf16 weights for vdpbf16ps / AMX: panel word
// (tap * cg / 2 + p) * 32 + o = (w[o0 + o][2p][tap], w[o0 + o][2p + 1][tap]) for o < width,
// zero words for o >= width. w is the whole [O][cg][taps] tensor of total_elems elements
// (cg even); 16 output channels at a time (transposes up to 16 taps, gathers beyond).
void pack_bf16_panel_avx512(const uint16_t* w, int64_t total_elems, int64_t o0, int width,
                            int64_t cg, int64_t taps, uint32_t* panel);

}  // namespace mixprec::kernels::conv_detail
