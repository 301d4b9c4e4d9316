#pragma once
// The two block kernels of convnext_mlp (mixprec/kernels/convnext.h), written once over a SIMD
// lane type S (simd_scalar.h's interface): the scalar level is the reference, the AVX2 and
// AVX-512 levels the same arithmetic on 8 and 16 pixels at a time.
//
// Vectors run over pixels, not channels: with 8-32 channels a vector over channels is half
// empty or less, and every pixel would pay horizontal sums (LayerNorm's statistics) and a chain
// of dependent FMAs. A block of up to kBlock pixels is transposed once into f32 [channel][pixel]
// rows (convert_strided), then LayerNorm, the two small matrix products and GELU are
// elementwise over pixel vectors with the weights broadcast. The hidden values are stored
// rounded in that transposed layout ([rC][kBlock] per block: the layout is the kernel's own).
// (The transposes: layout/pixel_rows.h.)
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "../layout/pixel_rows.h"
#include "../simd/simd_math.h"

namespace mixprec::kernels::convnext_detail {

constexpr int64_t kBlock = 256;  // pixels per block (a multiple of every level's lane count)
constexpr int kRegs = 4;          // output rows computed together (accumulators in registers)
constexpr int64_t kMaxLanes = 16;  // the widest level's f32 lanes

// Pass 1 over one block of `pixels` (<= kBlock) pixels: LayerNorm, expand + bias, GELU, rounded
// into h; sumsq[j] = the sum over the block's pixels of h[j]^2 (of the rounded values).
struct ExpandBlock {
  const void* x;  // [pixels][channels] in dtype
  DType dtype;
  int64_t pixels, channels, hidden;
  const float* norm_weight;  // [channels]
  const float* norm_bias;    // [channels]
  float norm_eps;
  const float* expand;       // [hidden][channels]
  const float* expand_bias;  // [hidden]
  void* h;                   // [hidden][kBlock] in dtype
  float* sumsq;              // [hidden], written
  float* scratch;            // [channels][kBlock] f32, then [channels][kBlock] of dtype
};
using ExpandBlockFn = void(const ExpandBlock&);

// Pass 2: out = residual + bias + project h, rounded once.
struct ProjectBlock {
  const void* h;         // [hidden][kBlock] in dtype
  const void* residual;  // [pixels][channels] in dtype
  void* out;             // [pixels][channels] in dtype
  DType dtype;
  int64_t pixels, channels, hidden;
  const float* project;  // [channels][hidden]: GRN's factor folded in
  const float* bias;     // [channels]: GRN's beta folded in
  float* scratch;        // [channels][kBlock] + [hidden][kMaxLanes] f32, then
                         // [channels][kBlock] of dtype
};
using ProjectBlockFn = void(const ProjectBlock&);

void expand_block_scalar(const ExpandBlock& a);
void expand_block_avx2(const ExpandBlock& a);
void expand_block_avx512(const ExpandBlock& a);
void project_block_scalar(const ProjectBlock& a);
void project_block_avx2(const ProjectBlock& a);
void project_block_avx512(const ProjectBlock& a);

// Hidden channels j0 .. j0 + R - 1 of the pixel vector at p: expand + bias, GELU, rounded into
// h, and their squares into sumsq (pixels past the block's end count zero). R is a constant so
// the accumulators stay in registers.
template <class S, int R>
void expand_group(const ExpandBlock& a, const float* xt, int64_t p, int lanes, int64_t j0) {
  using F = typename S::F;
  const int64_t c = a.channels;
  const std::size_t es = dtype_size(a.dtype);
  F acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i] = S::set1(a.expand_bias[j0 + i]);
  for (int64_t k = 0; k < c; ++k) {
    const F y = S::load(xt + k * kBlock + p);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = S::fmadd(S::set1(a.expand[(j0 + i) * c + k]), y, acc[i]);
  }
  for (int i = 0; i < R; ++i) {
    const int64_t j = j0 + i;
    const F g = S::fill_tail(S::round_to(a.dtype, simd::gelu_erf<S>(acc[i])), lanes, 0.0F);
    S::store_n(static_cast<char*>(a.h) + static_cast<std::size_t>(j * kBlock + p) * es, a.dtype, g,
               lanes);
    a.sumsq[j] += S::reduce_add(S::mul(g, g));
  }
}

// Output channels k0 .. k0 + R - 1 of the pixel vector at p: the projection of the widened
// hidden values hw [hidden][kW], added to the f32 residual rows in ot.
template <class S, int R>
void project_group(const ProjectBlock& a, const float* hw, float* ot, int64_t p, int64_t k0) {
  using F = typename S::F;
  constexpr int64_t kW = S::kWidth;
  const int64_t hd = a.hidden;
  F acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) acc[i] = S::set1(a.bias[k0 + i]);
  for (int64_t j = 0; j < hd; ++j) {
    const F hj = S::load(hw + j * kW);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = S::fmadd(S::set1(a.project[(k0 + i) * hd + j]), hj, acc[i]);
  }
  for (int i = 0; i < R; ++i) {
    float* row = ot + (k0 + i) * kBlock + p;
    S::store(row, S::add(acc[i], S::load(row)));
  }
}

template <class S>
void expand_block(const ExpandBlock& a) {
  using F = typename S::F;
  constexpr int64_t kW = S::kWidth;
  const int64_t c = a.channels, hd = a.hidden, np = a.pixels;
  float* xt = a.scratch;  // [c][kBlock]: x, then LayerNorm(x) in place
  layout_detail::rows_from_pixels(a.x, a.dtype, np, c, xt, kBlock, xt + c * kBlock);
  for (int64_t j = 0; j < hd; ++j) a.sumsq[j] = 0.0F;
  const F inv_c = S::set1(1.0F / static_cast<float>(c));
  for (int64_t p = 0; p < np; p += kW) {
    const int lanes = static_cast<int>(np - p < kW ? np - p : kW);
    // LayerNorm statistics in f32: the mean, then the squared deviations from it.
    F sum = S::zero();
    for (int64_t k = 0; k < c; ++k) sum = S::add(sum, S::load(xt + k * kBlock + p));
    const F mean = S::mul(sum, inv_c);
    F squares = S::zero();
    for (int64_t k = 0; k < c; ++k) {
      const F d = S::sub(S::load(xt + k * kBlock + p), mean);
      squares = S::fmadd(d, d, squares);
    }
    const F rstd =
        S::div(S::set1(1.0F), S::sqrt(S::add(S::mul(squares, inv_c), S::set1(a.norm_eps))));
    for (int64_t k = 0; k < c; ++k) {
      const F d = S::sub(S::load(xt + k * kBlock + p), mean);
      S::store(xt + k * kBlock + p, S::fmadd(S::mul(d, rstd), S::set1(a.norm_weight[k]),
                                             S::set1(a.norm_bias[k])));
    }
    // expand + bias, GELU, one rounding: kRegs hidden channels at a time share each load of a
    // normalised row.
    int64_t j0 = 0;
    for (; j0 + kRegs <= hd; j0 += kRegs) expand_group<S, kRegs>(a, xt, p, lanes, j0);
    for (; j0 < hd; ++j0) expand_group<S, 1>(a, xt, p, lanes, j0);
  }
}

template <class S>
void project_block(const ProjectBlock& a) {
  constexpr int64_t kW = S::kWidth;
  const int64_t c = a.channels, hd = a.hidden, np = a.pixels;
  const std::size_t es = dtype_size(a.dtype);
  float* ot = a.scratch;  // [c][kBlock]: the residual, then the output, in f32
  float* hw = ot + c * kBlock;  // [hidden][kW]: one pixel vector's hidden values in f32
  float* tmp = hw + hd * kMaxLanes;
  layout_detail::rows_from_pixels(a.residual, a.dtype, np, c, ot, kBlock, tmp);
  for (int64_t p = 0; p < np; p += kW) {
    const int lanes = static_cast<int>(np - p < kW ? np - p : kW);
    for (int64_t j = 0; j < hd; ++j)
      S::store(hw + j * kW,
               S::load_n(static_cast<const char*>(a.h) + static_cast<std::size_t>(j * kBlock + p) * es,
                         a.dtype, lanes));
    // kRegs output channels at a time share each load of a hidden row.
    int64_t k0 = 0;
    for (; k0 + kRegs <= c; k0 += kRegs) project_group<S, kRegs>(a, hw, ot, p, k0);
    for (; k0 < c; ++k0) project_group<S, 1>(a, hw, ot, p, k0);
  }
  layout_detail::pixels_from_rows(ot, kBlock, np, c, a.out, a.dtype, tmp);  // one rounding
}

}  // namespace mixprec::kernels::convnext_detail
