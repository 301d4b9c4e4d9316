// AMX-BF16 direct convolution (conv_direct.h). Tiles, all 16 rows x 64 bytes:
//   tmm0..3  C: f32 [16 pixels][16 columns], 2 pixel segments x 2 column halves of a panel
//   tmm4, 5  A: bf16 [16 pixels][32 channels] of segment 0, 1 under one tap
//   tmm6, 7  B: bf16 [16 k pairs][16 columns][2], the two halves of a 32-column panel
// The instruction's rules (Intel SDM, TDPBF16PS): per k pair the two products are exact and
// are added to the f32 accumulator, round to nearest even, bf16 subnormal inputs read as zero
// and subnormal results flushed: as vdpbf16ps (docs/NUMERICS.md).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "../isa/thread_scratch.h"
#include "../simd/amx_tile.h"
#include "conv_direct.h"
#include "../gemm/gemm_tile.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::conv_detail {
namespace {

using gemm_detail::amx_configure_16x64;
using gemm_detail::AmxRowWriter;

constexpr int kSeg = 16;                        // pixels per A tile
constexpr int kChunk = 32;                      // channels per A tile row (64 bytes)
constexpr int kPanel = gemm_detail::kAmxPanel;  // columns per packed B panel
constexpr int kPanelRowBytes = 128;             // one k pair of a panel: 32 columns x 2 bf16

// The epilogue of output pixel `pixel`, columns from `col` (AmxConvProblem::epilogue).
inline gemm_detail::TileEpilogue epilogue_at(const gemm_detail::TileEpilogue& base, int64_t pixel,
                                             int64_t col) {
  gemm_detail::TileEpilogue ep = base;
  ep.c = static_cast<char*>(ep.c) +
         static_cast<std::size_t>(pixel * ep.ldc + col) * dtype_size(ep.c_dtype);
  if (ep.bias != nullptr)
    ep.bias = static_cast<const char*>(ep.bias) +
              static_cast<std::size_t>(col) * dtype_size(ep.bias_dtype);
  if (ep.residual != nullptr)
    ep.residual =
        static_cast<const char*>(ep.residual) +
        static_cast<std::size_t>(pixel * ep.residual_ld + col) * dtype_size(ep.residual_dtype);
  return ep;
}

// One segment: up to 16 consecutive output pixels of one output row.
struct Segment {
  int64_t n, oy, ox0;
  int width;
};

// The input rows a thread's segments read, each copied once with a zero border of pad_w
// pixels on both sides into a small ring of slots (each [W + 2 pad_w][Cg]), so every tap of
// every segment is one strided tile load. A row of padding is never stored: its taps are
// skipped. The ring is the thread's own and a few rows deep, so it stays in L1/L2, the copy is
// done by the thread that reads it (no separate pass over the input, no barrier) and a row
// read by consecutive segments is copied once.
struct Ring {
  char* data;
  int64_t* keys;                               // [slots] the row each slot holds: n * H + iy, or -1
  int64_t slot_mask, slot_bytes, pixel_bytes;  // slots: a power of two (no division per tap)
};

// The slot of input row iy of image n, copied in if the ring does not hold it.
inline const char* ring_row(const AmxConvProblem& p, Ring& r, int64_t n, int64_t iy) {
  const int64_t key = n * p.h + iy, slot = key & r.slot_mask;
  char* row = r.data + slot * r.slot_bytes;
  if (r.keys[slot] == key) return row;
  r.keys[slot] = key;
  const std::size_t pad_bytes = static_cast<std::size_t>(p.pad_w * r.pixel_bytes);
  std::memset(row, 0, pad_bytes);
  std::memset(row + pad_bytes + p.w * r.pixel_bytes, 0, pad_bytes);
  const char* src =
      reinterpret_cast<const char*>(p.x + n * p.x_stride_n + (iy >> p.scale_shift) * p.x_stride_h);
  char* dst = row + pad_bytes;
  if (p.scale_shift != 0) {  // a fused upsample: each of x's pixels 2^shift times
    for (int64_t i = 0; i < p.w; ++i)
      std::memcpy(dst + i * r.pixel_bytes, src + (i >> p.scale_shift) * p.x_stride_w * 2,
                  static_cast<std::size_t>(r.pixel_bytes));
  } else if (p.x_stride_w == p.cg) {
    std::memcpy(dst, src, static_cast<std::size_t>(p.w * r.pixel_bytes));
  } else {
    for (int64_t i = 0; i < p.w; ++i)
      std::memcpy(dst + i * r.pixel_bytes, src + i * p.x_stride_w * 2,
                  static_cast<std::size_t>(r.pixel_bytes));
  }
  return row;
}

// Pixel 0 of segment s under tap (ky, kx), its row fetched into the ring; null when the tap's
// input row is padding.
inline const char* tap_base(const AmxConvProblem& p, Ring& r, const Segment& s, int64_t ky,
                            int64_t kx) {
  const int64_t iy = s.oy * p.stride_h - p.pad_h + ky * p.dilation_h;
  if (iy < 0 || iy >= p.h) return nullptr;
  return ring_row(p, r, s.n, iy) + (s.ox0 * p.stride_w + kx * p.dilation_w) * r.pixel_bytes;
}

// Whether every tap row of segment s is (still) in the ring.
inline bool ring_holds(const AmxConvProblem& p, const Ring& r, const Segment& s) {
  for (int64_t ky = 0; ky < p.kh; ++ky) {
    const int64_t iy = s.oy * p.stride_h - p.pad_h + ky * p.dilation_h;
    if (iy < 0 || iy >= p.h) continue;
    const int64_t key = s.n * p.h + iy;
    if (r.keys[key & r.slot_mask] != key) return false;
  }
  return true;
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
void run_unit(const AmxConvProblem& p, Ring& ring, const Segment* segs, int count,
              const char** taps, float* cbufs, int& cur, Pending& pending) {
  const int64_t ntaps = p.kh * p.kw, chunks = p.cg / kChunk;
  const int64_t a_stride = p.stride_w * ring.pixel_bytes;
  // Segments of one output row read the same input rows: the second's taps are the first's,
  // 16 pixels on (the common case: one lookup per input row instead of one per tap).
  const bool same_row = count == 2 && segs[1].n == segs[0].n && segs[1].oy == segs[0].oy;
  const int64_t seg_offset = kSeg * a_stride;
  for (int64_t ky = 0; ky < p.kh; ++ky) {
    const char* row0 = tap_base(p, ring, segs[0], ky, 0);
    const char* row1 = count < 2  ? nullptr
                       : same_row ? (row0 != nullptr ? row0 + seg_offset : nullptr)
                                  : tap_base(p, ring, segs[1], ky, 0);
    for (int64_t kx = 0; kx < p.kw; ++kx) {
      const int64_t t = ky * p.kw + kx, shift = kx * p.dilation_w * ring.pixel_bytes;
      taps[t * 2] = row0 != nullptr ? row0 + shift : nullptr;
      taps[t * 2 + 1] = row1 != nullptr ? row1 + shift : nullptr;
    }
  }
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
      pending.writers[s].reset(cbuf + s * kSeg * kPanel, g.width, cols,
                               epilogue_at(p.epilogue, pixel0, j * kPanel));
    }
    cur ^= 1;
  }
}

}  // namespace

void amx_conv(const AmxConvProblem& p) {
  const int64_t pixel_bytes = p.cg * 2;
  const int64_t slot_bytes = (p.w + 2 * p.pad_w) * pixel_bytes;
  // Slots: the rows of one unit (two segments, at most one output row apart) plus the rows
  // the next unit adds, so consecutive units find their shared rows still there.
  const int64_t window = p.stride_h + (p.kh - 1) * p.dilation_h + 1;
  const int64_t slots = std::bit_ceil(static_cast<uint64_t>(window + 2 * p.stride_h));
  // Past the last slot: what a partial segment's tile rows read beyond its end (computed,
  // never stored).
  const int64_t slack = (kSeg * p.stride_w + p.kw * p.dilation_w) * pixel_bytes + 64;
  const int64_t per_row = (p.ow + kSeg - 1) / kSeg;
  const int64_t segments = p.n * p.oh * per_row;
  const int64_t units = (segments + 1) / 2;
  auto segment = [&](int64_t i) {
    const int64_t row = i / per_row, k = i % per_row;
    return Segment{row / p.oh, row % p.oh, k * kSeg,
                   static_cast<int>(std::min<int64_t>(kSeg, p.ow - k * kSeg))};
  };
  parallel_for(0, units, 1, [&](int64_t lo, int64_t hi) {
    // The thread's ring and tap pointers, reused across calls.
    // (zeroed when they grow: the ring's slack is read, so it must stay finite).
    char* const ring_buffer = static_cast<char*>(thread_scratch(
        ScratchSlot::AmxConvRing, static_cast<std::size_t>(slots * slot_bytes + slack)));
    int64_t* const keys = static_cast<int64_t*>(thread_scratch(
        ScratchSlot::AmxConvRingKeys, static_cast<std::size_t>(slots) * sizeof(int64_t)));
    std::fill_n(keys, slots, int64_t{-1});
    const char** const taps = static_cast<const char**>(thread_scratch(
        ScratchSlot::AmxConvTaps, static_cast<std::size_t>(2 * p.kh * p.kw) * sizeof(char*)));
    Ring ring{ring_buffer, keys, slots - 1, slot_bytes, pixel_bytes};
    amx_configure_16x64();
    alignas(64) float cbufs[2 * 2 * kSeg * kPanel];  // two blocks: being stored, pending
    int cur = 0;
    Pending pending;
    for (int64_t u = lo; u < hi; ++u) {
      const int count = 2 * u + 1 < segments ? 2 : 1;
      const Segment segs[2] = {segment(2 * u), count == 2 ? segment(2 * u + 1) : Segment{}};
      // Fetching the second segment's rows can evict the first's when the two are far apart
      // (other images, large strides): then each runs alone.
      if (count == 2 && (segs[1].n != segs[0].n || segs[1].oy != segs[0].oy)) {
        for (int64_t ky = 0; ky < p.kh; ++ky) {
          tap_base(p, ring, segs[0], ky, 0);
          tap_base(p, ring, segs[1], ky, 0);
        }
        if (!ring_holds(p, ring, segs[0]) || !ring_holds(p, ring, segs[1])) {
          run_unit(p, ring, &segs[0], 1, taps, cbufs, cur, pending);
          run_unit(p, ring, &segs[1], 1, taps, cbufs, cur, pending);
          continue;
        }
      }
      run_unit(p, ring, segs, count, taps, cbufs, cur, pending);
    }
    pending.flush();
    _tile_release();
  });
}

}  // namespace mixprec::kernels::conv_detail
