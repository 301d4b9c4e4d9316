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

#include "gemm_internal.h"

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
using DirectTileFn = void(const DirectArgs& args, int nr_eff,
                          const gemm_detail::TileEpilogue& ep);

struct DirectKernel {
  int nr;
  DType compute;                // F32: f32 input and weights; BF16: bf16 input, Cg even
  DirectTileFn* const* tiles;   // tiles[m - 1] handles m pixels, 1 <= m <= kDirectMaxMr
};

// Null when the level has no direct kernel for this compute dtype (AVX2 and scalar use
// im2col tiles).
const DirectKernel* direct_kernel_avx512();      // f32
const DirectKernel* direct_kernel_avx512bf16();  // bf16

}  // namespace mixprec::kernels::conv_detail
