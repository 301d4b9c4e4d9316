// AMX-BF16 direct convolution (conv_direct.h). Tiles, all 16 rows x 64 bytes:
//   tmm0..3  C: f32 [16 pixels][16 columns], 2 pixel segments x 2 column halves of a panel
//   tmm4, 5  A: bf16 [16 pixels][32 channels] of segment 0, 1 under one tap
//   tmm6, 7  B: bf16 [16 k pairs][16 columns][2], the two halves of a 32-column panel
// The instruction's rules (Intel SDM, TDPBF16PS): per k pair the two products are exact and
// are added to the f32 accumulator, round to nearest even, bf16 subnormal inputs read as zero
// and subnormal results flushed: as vdpbf16ps (docs/NUMERICS.md).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "amx_tile.h"
#include "conv_direct.h"
#include "gemm_tile.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "simd_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

using gemm_detail::amx_configure_16x64;
using gemm_detail::AmxRowWriter;

constexpr int kSeg = 16;                        // pixels per A tile
constexpr int kChunk = 32;                      // channels per A tile row (64 bytes)
constexpr int kPanel = gemm_detail::kAmxPanel;  // columns per packed B panel
constexpr int kPanelRowBytes = 128;             // one k pair of a panel: 32 columns x 2 bf16

// One segment: up to 16 consecutive output pixels of one output row.
struct Segment {
  int64_t n, oy, ox0;
  int width;
};

// A zero-padded copy of the group's input: [N][H + 2 pad_h][W + 2 pad_w][Cg], then slack for
// the rows past a partial segment's end (computed, never stored). Every tap of every segment
// is then one strided tile load; the taps whose input row is padding are skipped.
struct Padded {
  const char* data;
  int64_t row_bytes, image_bytes, pixel_bytes;  // one padded row, image, pixel
  int64_t n0;                                   // the first image held
};

// Pixel 0 of segment s under tap (ky, kx) in the padded copy, or null when the tap's input row
// is padding for the whole segment.
inline const char* tap_base(const AmxConvProblem& p, const Padded& x, const Segment& s, int64_t ky,
                            int64_t kx) {
  const int64_t iy = s.oy * p.stride_h - p.pad_h + ky * p.dilation_h;
  if (iy < 0 || iy >= p.h) return nullptr;
  return x.data + (s.n - x.n0) * x.image_bytes + (iy + p.pad_h) * x.row_bytes +
         (s.ox0 * p.stride_w + kx * p.dilation_w) * x.pixel_bytes;
}

// An output block whose accumulators are in a cbuf, waiting for its epilogue: one row writer
// per segment.
struct Pending {
  AmxRowWriter writers[2];
  int count = 0, next = 0;
  void write(int n) {
    while (n > 0 && next < count) {
      n -= writers[next].write(n);
      if (writers[next].rows_left() == 0) ++next;
    }
  }
  void flush() { write(2 * kSeg); }
};

// Segments s0 and (if two) s1 times every column panel. Software-pipelined: the previous
// block's epilogue (vector units) is written a few rows after each k step of this block's
// tile instructions, so it overlaps with the tile unit working through them; then this
// block's accumulators are stored to the other cbuf and become the pending block.
void run_unit(const AmxConvProblem& p, const Padded& x, const Segment* segs, int count,
              const char** taps, float* cbufs, int& cur, Pending& pending) {
  const int64_t ntaps = p.kh * p.kw, chunks = p.cg / kChunk;
  const int64_t a_stride = p.stride_w * x.pixel_bytes;
  for (int64_t t = 0; t < ntaps; ++t)
    for (int s = 0; s < 2; ++s)
      taps[t * 2 + s] = s < count ? tap_base(p, x, segs[s], t / p.kw, t % p.kw) : nullptr;
  const int64_t panels = (p.og + kPanel - 1) / kPanel;
  const std::size_t panel_bytes = static_cast<std::size_t>(ntaps * p.cg / 2) * kPanelRowBytes;
  int steps = 0;  // k steps of one block: the pending epilogue is spread over them
  for (int64_t t = 0; t < ntaps; ++t)
    if (taps[t * 2] != nullptr || taps[t * 2 + 1] != nullptr) steps += static_cast<int>(chunks);
  const int rows_per_step = std::max(1, (2 * kSeg + steps - 1) / std::max(1, steps));
  for (int64_t j = 0; j < panels; ++j) {
    const char* panel = static_cast<const char*>(p.b_panels) + j * panel_bytes;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < ntaps; ++t) {
      const char* a0 = taps[t * 2];
      const char* a1 = taps[t * 2 + 1];
      if (a0 == nullptr && a1 == nullptr) continue;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* b =
            panel + static_cast<std::size_t>((t * p.cg + ch * kChunk) / 2) * kPanelRowBytes;
        _tile_loadd(6, b, kPanelRowBytes);
        _tile_loadd(7, b + 64, kPanelRowBytes);
        if (a0 != nullptr) {
          _tile_loadd(4, a0 + ch * 64, a_stride);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (a1 != nullptr) {
          _tile_loadd(5, a1 + ch * 64, a_stride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        pending.write(rows_per_step);
      }
    }
    pending.flush();
    float* cbuf = cbufs + cur * 2 * kSeg * kPanel;
    _tile_stored(0, cbuf, 128);
    _tile_stored(1, cbuf + 16, 128);
    _tile_stored(2, cbuf + 16 * 32, 128);
    _tile_stored(3, cbuf + 16 * 32 + 16, 128);
    const int cols = static_cast<int>(std::min<int64_t>(kPanel, p.og - j * kPanel));
    pending.count = count;
    pending.next = 0;
    for (int s = 0; s < count; ++s) {
      const Segment& g = segs[s];
      const int64_t pixel0 = (g.n * p.oh + g.oy) * p.ow + g.ox0;
      pending.writers[s] = AmxRowWriter(cbuf + s * kSeg * kPanel, g.width, cols,
                                        p.epilogue(p.epilogue_ctx, pixel0, j * kPanel));
    }
    cur ^= 1;
  }
}

}  // namespace

void amx_conv(const AmxConvProblem& p) {
  // The padded copy holds a group of images at a time (about 1 MiB, so it stays in L2 while
  // they are computed), in a buffer reused across calls.
  const int64_t hp = p.h + 2 * p.pad_h, wp = p.w + 2 * p.pad_w;
  const int64_t pixel_bytes = p.cg * 2;
  Padded x{nullptr, wp * pixel_bytes, hp * wp * pixel_bytes, pixel_bytes, 0};
  const int64_t group = std::clamp<int64_t>((int64_t{1} << 20) / x.image_bytes, 1, p.n);
  const std::size_t slack = static_cast<std::size_t>((kSeg * p.stride_w + 1) * pixel_bytes + 64);
  const std::size_t bytes = static_cast<std::size_t>(group * x.image_bytes) + slack;
  static thread_local Allocation buffer;  // the calling thread's; workers only fill and read it
  if (buffer.size() < bytes) buffer = Allocation(bytes);
  char* padded = static_cast<char*>(buffer.data());
  x.data = padded;
  const int64_t per_row = (p.ow + kSeg - 1) / kSeg;
  for (int64_t n0 = 0; n0 < p.n; n0 += group) {
    const int64_t images = std::min(group, p.n - n0);
    x.n0 = n0;
    std::memset(padded + images * x.image_bytes, 0, slack);
    parallel_for(0, images * hp, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = n0 + r / hp, y = r % hp - p.pad_h;
        char* row = padded + r * x.row_bytes;
        if (y < 0 || y >= p.h) {
          std::memset(row, 0, static_cast<std::size_t>(x.row_bytes));
          continue;
        }
        std::memset(row, 0, static_cast<std::size_t>(p.pad_w * pixel_bytes));
        std::memset(row + (p.pad_w + p.w) * pixel_bytes, 0,
                    static_cast<std::size_t>(p.pad_w * pixel_bytes));
        const char* src = reinterpret_cast<const char*>(p.x + n * p.x_stride_n + y * p.x_stride_h);
        char* dst = row + p.pad_w * pixel_bytes;
        if (p.x_stride_w == p.cg) {
          std::memcpy(dst, src, static_cast<std::size_t>(p.w * pixel_bytes));
        } else {
          for (int64_t i = 0; i < p.w; ++i)
            std::memcpy(dst + i * pixel_bytes, src + i * p.x_stride_w * 2,
                        static_cast<std::size_t>(pixel_bytes));
        }
      }
    });

    const int64_t segments = images * p.oh * per_row;
    const int64_t units = (segments + 1) / 2;
    auto segment = [&](int64_t i) {
      const int64_t row = i / per_row, k = i % per_row;
      return Segment{n0 + row / p.oh, row % p.oh, k * kSeg,
                     static_cast<int>(std::min<int64_t>(kSeg, p.ow - k * kSeg))};
    };
    parallel_for(0, units, 1, [&](int64_t lo, int64_t hi) {
      amx_configure_16x64();
      alignas(64) float cbufs[2 * 2 * kSeg * kPanel];  // two blocks: being stored, pending
      int cur = 0;
      Pending pending;
      thread_local std::vector<const char*> taps;
      if (taps.size() < static_cast<std::size_t>(2 * p.kh * p.kw))
        taps.resize(static_cast<std::size_t>(2 * p.kh * p.kw));
      for (int64_t u = lo; u < hi; ++u) {
        const Segment segs[2] = {segment(2 * u),
                                 2 * u + 1 < segments ? segment(2 * u + 1) : Segment{}};
        run_unit(p, x, segs, 2 * u + 1 < segments ? 2 : 1, taps.data(), cbufs, cur, pending);
      }
      pending.flush();
      _tile_release();
    });
  }
}

}  // namespace mixprec::kernels::conv_detail
