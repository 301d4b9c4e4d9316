// Depthwise convolution rows for AVX-512 (conv_direct.h, DepthwiseRow): per output pixel the
// channels in 16-lane vectors (a masked tail), every tap one load of the input pixel's channels
// and one FMA with the tap's weights, f32 accumulators in registers. ConvNeXt's 7x7 depthwise
// conv is 49 taps of this per pixel; the generic loop kept its accumulators in memory. A
// one-channel input (shared_input) is broadcast instead of loaded: PeakNet's stem.
#include <immintrin.h>

#include <cstdint>

#include "conv_direct.h"

namespace mixprec::kernels::conv_detail {

namespace {

// kShared: one input channel, broadcast to every output channel (DepthwiseRow::shared_input).
template <bool kShared>
void rows_avx512(const DepthwiseRow& r, float* out) {
  const int64_t c = r.channels, in_step = kShared ? 1 : c;
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const int64_t lanes = c - c0 < 16 ? c - c0 : 16;
    const __mmask16 m = static_cast<__mmask16>((uint32_t{1} << lanes) - 1u);
    const __m512 bias = _mm512_maskz_loadu_ps(m, r.bias + c0);
    for (int64_t ox = 0; ox < r.out_width; ++ox) {
      __m512 acc = bias;
      const int64_t ix0 = ox * r.stride - r.pad;
      for (int64_t ky = 0; ky < r.kernel_h; ++ky) {
        const float* row = r.rows[ky];
        if (row == nullptr) continue;  // above or below the image
        const float* wk = r.weight + ky * r.kernel_w * c + c0;
        for (int64_t kx = 0; kx < r.kernel_w; ++kx) {
          const int64_t ix = ix0 + kx * r.dilation;
          if (ix < 0 || ix >= r.in_width) continue;
          const __m512 in = kShared ? _mm512_set1_ps(row[ix])
                                    : _mm512_maskz_loadu_ps(m, row + ix * in_step + c0);
          acc = _mm512_fmadd_ps(in, _mm512_maskz_loadu_ps(m, wk + kx * c), acc);
        }
      }
      _mm512_mask_storeu_ps(out + ox * c + c0, m, acc);
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
