// AMX-BF16 GEMM block (gemm_internal.h). Tiles, all 16 rows x 64 bytes:
//   tmm0..3  C: f32 [16 rows][16 columns], 2 row tiles x 2 column halves of a 32-column panel
//   tmm4, 5  A: bf16 [16 rows][32 k], read in place with the row stride of A
//   tmm6, 7  B: bf16 [16 k pairs][16 columns][2], the halves of a panel (128-byte row stride)
// TDPBF16PS follows vdpbf16ps's rules (round to nearest even, bf16 subnormal inputs read as zero,
// subnormal results flushed; docs/NUMERICS.md). The epilogue of one 32 x 32 block runs after the
// next block's tile instructions are issued, so vector and tile units overlap.
#include <algorithm>
#include <cstring>

#include "../isa/thread_scratch.h"
#include "../simd/amx_tile.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kRows = 16;        // rows per A tile
constexpr int kChunkBytes = 64;  // 32 bf16 of k per A tile row
constexpr int kPanelRowBytes = kAmxPanel * 4;

// The epilogue of the 32 x 32 block at (row0, col0) whose f32 sums are in cbuf.
AmxRowWriter block_writer(const float* cbuf, int64_t row0, int64_t col0, int rows, int cols,
                          const MutableMatrixView& c, const GemmEpilogue& ep) {
  return AmxRowWriter(cbuf, rows, cols, tile_epilogue(ep, c, row0, col0));
}

}  // namespace

void amx_gemm_block(const MatrixView& a, int64_t m0, int64_t m1, const char* b_panels,
                    std::size_t panel_stride, int64_t n0, int64_t n1, const MutableMatrixView& c,
                    const GemmEpilogue& ep) {
  const int64_t k = a.cols, chunks = k / 32;
  const std::size_t a_row_bytes = static_cast<std::size_t>(a.row_stride) * 2;
  const char* a_base = static_cast<const char*>(a.data);
  // A partial 16-row tile is copied here with zero rows after it (per thread, reused).
  char* const staged = static_cast<char*>(
      thread_scratch(ScratchSlot::AmxGemmStaging, static_cast<std::size_t>(kRows * k) * 2));
  amx_configure_16x64();
  alignas(64) float cbufs[2][2 * kRows * kAmxPanel];
  int cur = 0;
  AmxRowWriter pending;  // the previous block's epilogue, written a few rows per k step
  const int rows_per_step =
      std::max<int>(1, static_cast<int>((2 * kRows + chunks - 1) / std::max<int64_t>(1, chunks)));
  for (int64_t r0 = m0; r0 < m1; r0 += 2 * kRows) {
    // Row tiles s = 0, 1 of this block: base pointer and row stride, or none.
    const char* tile_a[2] = {nullptr, nullptr};
    std::size_t tile_stride[2] = {a_row_bytes, a_row_bytes};
    int tile_rows[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      const int64_t first = r0 + s * kRows;
      if (first >= m1) break;
      tile_rows[s] = static_cast<int>(std::min<int64_t>(kRows, m1 - first));
      if (tile_rows[s] == kRows) {
        tile_a[s] = a_base + static_cast<std::size_t>(first) * a_row_bytes;
      } else {  // the last rows: stage them (rows past them zero) so the load stays in bounds
        char* dst = staged;
        for (int r = 0; r < kRows; ++r) {
          if (r < tile_rows[s])
            std::memcpy(dst + static_cast<std::size_t>(r * k) * 2,
                        a_base + static_cast<std::size_t>(first + r) * a_row_bytes,
                        static_cast<std::size_t>(k) * 2);
          else
            std::memset(dst + static_cast<std::size_t>(r * k) * 2, 0,
                        static_cast<std::size_t>(k) * 2);
        }
        tile_a[s] = dst;
        tile_stride[s] = static_cast<std::size_t>(k) * 2;
      }
    }
    for (int64_t col = n0; col < n1; col += kAmxPanel) {
      const char* panel =
          b_panels + static_cast<std::size_t>((col - n0) / kAmxPanel) * panel_stride;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const char* a0 = tile_a[0];
      const char* a1 = tile_a[1];
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* b = panel + static_cast<std::size_t>(ch * 16) * kPanelRowBytes;
        _tile_loadd(6, b, kPanelRowBytes);
        _tile_loadd(7, b + 64, kPanelRowBytes);
        _tile_loadd(4, a0 + ch * kChunkBytes, tile_stride[0]);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (a1 != nullptr) {
          _tile_loadd(5, a1 + ch * kChunkBytes, tile_stride[1]);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        pending.write(rows_per_step);
      }
      pending.write(2 * kRows);
      float* cbuf = cbufs[cur];
      _tile_stored(0, cbuf, 128);
      _tile_stored(1, cbuf + 16, 128);
      _tile_stored(2, cbuf + 16 * 32, 128);
      _tile_stored(3, cbuf + 16 * 32 + 16, 128);
      pending = block_writer(cbuf, r0, col, tile_rows[0] + tile_rows[1],
                             static_cast<int>(std::min<int64_t>(kAmxPanel, n1 - col)), c, ep);
      cur ^= 1;
    }
  }
  pending.write(2 * kRows);
  _tile_release();
}

}  // namespace mixprec::kernels::gemm_detail
