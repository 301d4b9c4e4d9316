// Depthwise convolution rows for AVX-512 (conv_direct.h, DepthwiseRow): per output pixel the
// channels in 16-lane vectors (a masked tail), every tap one load of the input pixel's channels
// and one FMA with the tap's weights, f32 accumulators in registers, 8 pixels at a time. ConvNeXt's 7x7 depthwise
// conv is 49 taps of this per pixel; the generic loop kept its accumulators in memory. A
// one-channel input (shared_input) is broadcast instead of loaded: PeakNet's stem.
#include <immintrin.h>

#include <cstdint>

#include "conv_direct.h"

namespace mixprec::kernels::conv_detail {

namespace {

// Output pixels per tile: their accumulators are independent chains, so the FMAs of a tap
// overlap instead of each waiting on the last (a 7x7 tap chain per pixel alone is
// latency-bound), and each tap's weights are loaded once for the tile.
constexpr int kTile = 8;

// kShared: one input channel, broadcast to every output channel (DepthwiseRow::shared_input).
// kChecked: a tile of fewer than kTile pixels, or some tap of it falls left or right of the row
// (checked per pixel and tap). Unchecked tiles are whole, so the loops over i unroll and the
// accumulators stay in registers.
template <bool kShared, bool kChecked>
void tile_avx512(const DepthwiseRow& r, int64_t ox0, int n, int64_t c0, __mmask16 m, float* out) {
  // Locals, not r's fields: the stores below could alias r, so its fields would be reloaded.
  const int64_t c = r.channels, in_step = kShared ? 1 : c, stride = r.stride, dilation = r.dilation;
  const int64_t in_width = r.in_width, kernel_w = r.kernel_w, pixel_step = stride * in_step;
  const int64_t left = ox0 * stride - r.pad;  // the tile's first pixel's leftmost tap
  __m512 acc[kTile];
  const __m512 bias = _mm512_maskz_loadu_ps(m, r.bias + c0);
#pragma GCC unroll 8
  for (int i = 0; i < kTile; ++i) acc[i] = bias;
  for (int64_t ky = 0; ky < r.kernel_h; ++ky) {
    const float* row = r.rows[ky];
    if (row == nullptr) continue;  // above or below the image
    const float* wk = r.weight + ky * kernel_w * c + c0;
    for (int64_t kx = 0; kx < kernel_w; ++kx) {
      const __m512 w = _mm512_maskz_loadu_ps(m, wk + kx * c);
      const int64_t ix0 = left + kx * dilation;
      const float* src = row + ix0 * in_step + (kShared ? 0 : c0);
#pragma GCC unroll 8
      for (int i = 0; i < kTile; ++i) {
        if (kChecked) {
          const int64_t ix = ix0 + i * stride;
          if (i >= n) break;
          if (ix < 0 || ix >= in_width) continue;
        }
        const float* at = src + i * pixel_step;
        const __m512 in = kShared ? _mm512_set1_ps(*at) : _mm512_maskz_loadu_ps(m, at);
        acc[i] = _mm512_fmadd_ps(in, w, acc[i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kTile; ++i)
    if (!kChecked || i < n) _mm512_mask_storeu_ps(out + (ox0 + i) * c + c0, m, acc[i]);
}

template <bool kShared>
void rows_avx512(const DepthwiseRow& r, float* out) {
  const int64_t c = r.channels;
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const int64_t lanes = c - c0 < 16 ? c - c0 : 16;
    const __mmask16 m = static_cast<__mmask16>((uint32_t{1} << lanes) - 1u);
    for (int64_t ox0 = 0; ox0 < r.out_width; ox0 += kTile) {
      const int n = static_cast<int>(r.out_width - ox0 < kTile ? r.out_width - ox0 : kTile);
      const int64_t left = ox0 * r.stride - r.pad;
      const int64_t right = (ox0 + n - 1) * r.stride - r.pad + (r.kernel_w - 1) * r.dilation;
      if (n == kTile && left >= 0 && right < r.in_width)
        tile_avx512<kShared, false>(r, ox0, n, c0, m, out);
      else
        tile_avx512<kShared, true>(r, ox0, n, c0, m, out);
    }
  }
}

}  // namespace

void depthwise_row_avx512(const DepthwiseRow& r, float* out) {
  if (r.shared_input)
    rows_avx512<true>(r, out);
  else
    rows_avx512<false>(r, out);
}

}  // namespace mixprec::kernels::conv_detail
