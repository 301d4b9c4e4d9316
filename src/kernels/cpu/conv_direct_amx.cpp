// AMX-BF16 direct convolution (conv_direct.h). Tiles, all 16 rows x 64 bytes:
//   tmm0..3  C: f32 [16 pixels][16 columns], 2 pixel segments x 2 column halves of a panel
//   tmm4, 5  A: bf16 [16 pixels][32 channels] of segment 0, 1 under one tap
//   tmm6, 7  B: bf16 [16 k pairs][16 columns][2], the two halves of a 32-column panel
// The instruction's rules (Intel SDM, TDPBF16PS): per k pair the two products are exact and
// are added to the f32 accumulator, round to nearest even, bf16 subnormal inputs read as zero
// and subnormal results flushed: as vdpbf16ps (docs/NUMERICS.md).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_direct.h"
#include "gemm_tile.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "simd_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

constexpr int kSeg = 16;             // pixels per A tile
constexpr int kChunk = 32;           // channels per A tile row (64 bytes)
constexpr int kPanel = 32;           // columns per packed B panel
constexpr int kPanelRowBytes = 128;  // one k pair of a panel: 32 columns x 2 bf16

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// One segment: up to 16 consecutive output pixels of one output row.
struct Segment {
  int64_t n, oy, ox0;
  int width;
};

// Where a segment's A tile comes from under one tap.
struct SegmentTap {
  enum Kind { Skip, Direct, Staged } kind = Skip;
  const char* base = nullptr;      // Direct: pixel 0 (stride `stride` bytes per pixel)
  const char* rows[kSeg] = {};     // Staged: each pixel, or null for zeros
};

void locate(const AmxConvProblem& p, const Segment& s, int64_t ky, int64_t kx, SegmentTap& out) {
  out.kind = SegmentTap::Skip;
  const int64_t iy = s.oy * p.stride_h - p.pad_h + ky * p.dilation_h;
  if (iy < 0 || iy >= p.h) return;
  int valid = 0;
  const char* x = reinterpret_cast<const char*>(p.x);
  for (int r = 0; r < kSeg; ++r) {
    const int64_t ix = (s.ox0 + r) * p.stride_w - p.pad_w + kx * p.dilation_w;
    if (r < s.width && ix >= 0 && ix < p.w) {
      out.rows[r] = x + (s.n * p.x_stride_n + iy * p.x_stride_h + ix * p.x_stride_w) * 2;
      ++valid;
    } else {
      out.rows[r] = nullptr;
    }
  }
  if (valid == 0) return;
  out.kind = valid == kSeg ? SegmentTap::Direct : SegmentTap::Staged;
  out.base = out.rows[0];
}

// Channels [32 ch, 32 ch + 32) of each staged pixel into a 16 x 64-byte tile image.
inline void stage(const SegmentTap& t, int64_t ch, char* tile) {
  for (int r = 0; r < kSeg; ++r) {
    const __m512i v = t.rows[r] != nullptr ? _mm512_loadu_si512(t.rows[r] + ch * 64)
                                           : _mm512_setzero_si512();
    _mm512_store_si512(tile + r * 64, v);
  }
}

// Segments s0 and (if two) s1 times every column panel.
void run_unit(const AmxConvProblem& p, const Segment* segs, int count, SegmentTap* taps,
              char* staging, float* cbuf) {
  const int64_t ntaps = p.kh * p.kw, chunks = p.cg / kChunk;
  const int64_t a_stride = p.stride_w * p.x_stride_w * 2;
  for (int64_t t = 0; t < ntaps; ++t)
    for (int s = 0; s < count; ++s) locate(p, segs[s], t / p.kw, t % p.kw, taps[t * 2 + s]);
  const int64_t panels = (p.og + kPanel - 1) / kPanel;
  const std::size_t panel_bytes = static_cast<std::size_t>(ntaps * p.cg / 2) * kPanelRowBytes;
  for (int64_t j = 0; j < panels; ++j) {
    const char* panel = static_cast<const char*>(p.b_panels) + j * panel_bytes;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < ntaps; ++t) {
      const SegmentTap& t0 = taps[t * 2];
      const SegmentTap& t1 = taps[t * 2 + 1];
      const bool use0 = t0.kind != SegmentTap::Skip, use1 = count > 1 && t1.kind != SegmentTap::Skip;
      if (!use0 && !use1) continue;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* b = panel + static_cast<std::size_t>((t * p.cg + ch * kChunk) / 2) * kPanelRowBytes;
        _tile_loadd(6, b, kPanelRowBytes);
        _tile_loadd(7, b + 64, kPanelRowBytes);
        if (use0) {
          if (t0.kind == SegmentTap::Direct) {
            _tile_loadd(4, t0.base + ch * 64, a_stride);
          } else {
            stage(t0, ch, staging);
            _tile_loadd(4, staging, 64);
          }
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (use1) {
          if (t1.kind == SegmentTap::Direct) {
            _tile_loadd(5, t1.base + ch * 64, a_stride);
          } else {
            stage(t1, ch, staging + 1024);
            _tile_loadd(5, staging + 1024, 64);
          }
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
    }
    // cbuf: f32 [32 pixels][32 columns]
    _tile_stored(0, cbuf, 128);
    _tile_stored(1, cbuf + 16, 128);
    _tile_stored(2, cbuf + 16 * 32, 128);
    _tile_stored(3, cbuf + 16 * 32 + 16, 128);
    const int cols = static_cast<int>(std::min<int64_t>(kPanel, p.og - j * kPanel));
    for (int s = 0; s < count; ++s)
      for (int r = 0; r < segs[s].width; ++r) {
        const float* row = cbuf + (s * kSeg + r) * kPanel;
        __m512 acc[1][2] = {{_mm512_loadu_ps(row), _mm512_loadu_ps(row + 16)}};
        const int64_t pixel = (segs[s].n * p.oh + segs[s].oy) * p.ow + segs[s].ox0 + r;
        gemm_detail::finish_tile<simd::Avx512, 1, 2>(acc, cols,
                                                     p.epilogue(p.epilogue_ctx, pixel, j * kPanel));
      }
  }
}

}  // namespace

bool amx_usable() {
  static const bool usable = [] {
    const CpuFeatures& f = cpu_features();
    if (!(f.amx_tile && f.amx_bf16 && f.os_amx)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

void amx_conv(const AmxConvProblem& p) {
  const int64_t per_row = (p.ow + kSeg - 1) / kSeg;
  const int64_t segments = p.n * p.oh * per_row;
  const int64_t units = (segments + 1) / 2;
  auto segment = [&](int64_t i) {
    const int64_t row = i / per_row, k = i % per_row;
    return Segment{row / p.oh, row % p.oh, k * kSeg,
                   static_cast<int>(std::min<int64_t>(kSeg, p.ow - k * kSeg))};
  };
  parallel_for(0, units, 1, [&](int64_t lo, int64_t hi) {
    TileConfig cfg;
    for (int i = 0; i < 8; ++i) {
      cfg.rows[i] = 16;
      cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
    alignas(64) char staging[2 * 1024];
    alignas(64) float cbuf[2 * kSeg * kPanel];
    thread_local std::vector<SegmentTap> taps;
    if (taps.size() < static_cast<std::size_t>(2 * p.kh * p.kw))
      taps.resize(static_cast<std::size_t>(2 * p.kh * p.kw));
    for (int64_t u = lo; u < hi; ++u) {
      const Segment segs[2] = {segment(2 * u), 2 * u + 1 < segments ? segment(2 * u + 1) : Segment{}};
      run_unit(p, segs, 2 * u + 1 < segments ? 2 : 1, taps.data(), staging, cbuf);
    }
    _tile_release();
  });
}

}  // namespace mixprec::kernels::conv_detail
