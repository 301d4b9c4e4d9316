// The direct convolution's driver (conv_internal.h): row pointers per tile and tap, tiles per
// output row, threads over rows. The tiles themselves are in conv_direct_avx512*.cpp.
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_internal.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels::conv_detail {
namespace {

// Per-thread scratch of the direct convolution, reused across calls.
struct DirectScratch {
  std::vector<const void*> a_rows;  // [taps][kDirectMaxMr]
  std::vector<int> tap_index;       // [taps]
  Allocation zeros;                 // one zeroed pixel: the rows outside the image
};
DirectScratch& thread_direct_scratch() {
  thread_local DirectScratch scratch;
  return scratch;
}

}  // namespace

gemm_detail::TileEpilogue tile_epilogue(const GroupOutput& out, int64_t pixel, int64_t col) {
  const int64_t c = out.col0 + col;
  gemm_detail::TileEpilogue ep{
      1.0f,
      0.0f,
      nullptr,
      DType::F32,
      out.activation,
      nullptr,
      DType::F32,
      out.o,
      static_cast<char*>(out.ys.data_ptr()) +
          static_cast<std::size_t>(pixel * out.o + c) * out.ys.element_size(),
      out.ys.dtype(),
      out.o};
  if (out.bias != nullptr) {
    ep.bias = static_cast<const char*>(out.bias->data_ptr()) +
              static_cast<std::size_t>(c) * out.bias->element_size();
    ep.bias_dtype = out.bias->dtype();
  }
  if (out.residual != nullptr) {
    ep.residual = static_cast<const char*>(out.residual->data_ptr()) +
                  static_cast<std::size_t>(pixel * out.o + c) * out.residual->element_size();
    ep.residual_dtype = out.residual->dtype();
  }
  return ep;
}

// Direct convolution of group `grp`: threads take whole output rows; each row is cut into
// near-equal tiles of at most kDirectMaxMr pixels, and each tile runs once per column panel
// with the same row pointers (or, for large weights, panel by panel over all the rows).
void run_direct(const DirectKernel& dk, const Tensor& xs, const PackedMatrix& b,
                const Conv2dOptions& opt, const Geometry& g, int64_t grp, const GroupOutput& out) {
  const std::size_t es = xs.element_size();
  MIXPREC_ASSERT(dtype_size(dk.compute) == es);
  const std::size_t tap_bytes = static_cast<std::size_t>(g.cg * dk.nr) * es;
  const std::size_t panel_bytes = tap_bytes * static_cast<std::size_t>(g.kh * g.kw);
  const int64_t tiles = (g.ow + kDirectMaxMr - 1) / kDirectMaxMr;
  const int64_t panels = (g.og + dk.nr - 1) / dk.nr;
  const char* xp = static_cast<const char*>(xs.data_ptr());
  const int64_t sx_n = xs.stride(0), sx_h = xs.stride(2), sx_w = xs.stride(3);
  // Weights beyond about half of L2 are streamed once per panel over all of a thread's rows
  // instead of once per tile.
  const bool panel_outer = static_cast<std::size_t>(panels) * panel_bytes > (std::size_t{1} << 20);
  parallel_for(0, g.n * g.oh, 1, [&](int64_t lo, int64_t hi) {
    DirectScratch& s = thread_direct_scratch();
    const std::size_t max_rows = static_cast<std::size_t>(g.kh * g.kw * kDirectMaxMr);
    if (s.a_rows.size() < max_rows) s.a_rows.resize(max_rows);
    if (s.tap_index.size() < static_cast<std::size_t>(g.kh * g.kw))
      s.tap_index.resize(static_cast<std::size_t>(g.kh * g.kw));
    if (s.zeros.size() < static_cast<std::size_t>(g.cg) * es) {
      s.zeros = Allocation(static_cast<std::size_t>(g.cg) * es);
      std::memset(s.zeros.data(), 0, s.zeros.size());
    }
    // Row pointers of the tile at (row, ox0, width); returns the taps that touch the image.
    auto locate = [&](int64_t row, int64_t ox0, int width) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      int taps = 0;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
        if (iy < 0 || iy >= g.h) continue;
        const int64_t row_base = n * sx_n + iy * sx_h + grp * g.cg;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const void** rows = s.a_rows.data() + taps * kDirectMaxMr;
          bool inside = false;
          for (int i = 0; i < width; ++i) {
            const int64_t ix = (ox0 + i) * opt.stride_w - opt.pad_w + kx * opt.dilation_w;
            if (ix < 0 || ix >= g.w) {
              rows[i] = s.zeros.data();
            } else {
              rows[i] = xp + static_cast<std::size_t>(row_base + ix * sx_w) * es;
              inside = true;
            }
          }
          if (inside)
            s.tap_index[static_cast<std::size_t>(taps++)] = static_cast<int>(ky * g.kw + kx);
        }
      }
      return taps;
    };
    auto run_tile = [&](int64_t row, int64_t ox0, int width, int taps, int64_t j) {
      const DirectArgs args{
          taps,
          s.a_rows.data(),
          s.tap_index.data(),
          static_cast<const char*>(b.panels()) + static_cast<std::size_t>(j) * panel_bytes,
          tap_bytes,
          g.cg};
      const int cols = static_cast<int>(std::min<int64_t>(dk.nr, g.og - j * dk.nr));
      dk.tiles[width - 1](args, cols, tile_epilogue(out, row * g.ow + ox0, j * dk.nr));
    };
    if (!panel_outer) {  // each tile's row pointers serve every panel
      for (int64_t row = lo; row < hi; ++row)
        for (int64_t t = 0, ox0 = 0; t < tiles; ++t) {
          const int width = static_cast<int>(g.ow / tiles + (t < g.ow % tiles ? 1 : 0));
          const int taps = locate(row, ox0, width);
          for (int64_t j = 0; j < panels; ++j) run_tile(row, ox0, width, taps, j);
          ox0 += width;
        }
      return;
    }
    for (int64_t j = 0; j < panels; ++j)  // one panel at a time stays in L2
      for (int64_t row = lo; row < hi; ++row)
        for (int64_t t = 0, ox0 = 0; t < tiles; ++t) {
          const int width = static_cast<int>(g.ow / tiles + (t < g.ow % tiles ? 1 : 0));
          run_tile(row, ox0, width, locate(row, ox0, width), j);
          ox0 += width;
        }
  });
}

}  // namespace mixprec::kernels::conv_detail
