// transpose_2d: 32 x 32 tiles (4 KiB of f32 each side), each done as 8 x 8 sub-blocks whose
// loops have compile-time bounds, so the compiler keeps a sub-block in registers.
#include "mixprec/kernels/transpose.h"

#include <algorithm>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels {
namespace {

constexpr int64_t kTile = 32;
constexpr int64_t kSub = 8;

template <typename E>
void transpose_tile(const E* src, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t ld_src,
                    E* dst, int64_t ld_dst) {
  for (int64_t c = c0; c < c1; c += kSub)
    for (int64_t r = r0; r < r1; r += kSub) {
      if (r + kSub <= r1 && c + kSub <= c1) {
        E block[kSub][kSub];
        for (int64_t i = 0; i < kSub; ++i)
          for (int64_t j = 0; j < kSub; ++j) block[j][i] = src[(r + i) * ld_src + c + j];
        for (int64_t j = 0; j < kSub; ++j)
          for (int64_t i = 0; i < kSub; ++i) dst[(c + j) * ld_dst + r + i] = block[j][i];
      } else {
        for (int64_t j = c; j < std::min(c1, c + kSub); ++j)
          for (int64_t i = r; i < std::min(r1, r + kSub); ++i)
            dst[j * ld_dst + i] = src[i * ld_src + j];
      }
    }
}

template <typename E>
void transpose_typed(const E* src, int64_t rows, int64_t cols, int64_t ld_src, E* dst,
                     int64_t ld_dst) {
  const int64_t bands = (rows + kTile - 1) / kTile;
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, kTile * cols));
  parallel_for(0, bands, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t r0 = b * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile)
        transpose_tile(src, r0, r1, c0, std::min(cols, c0 + kTile), ld_src, dst, ld_dst);
    }
  });
}

}  // namespace

void transpose_2d(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst,
                  int64_t ld_dst, std::size_t elem_size) {
  MIXPREC_CHECK(
      rows >= 0 && cols >= 0 && (rows <= 1 || ld_src >= cols) && (cols <= 1 || ld_dst >= rows),
      "[transpose_2d] bad geometry: [", rows, ", ", cols, "] with leading dimensions ", ld_src,
      " -> ", ld_dst);
  switch (elem_size) {
    case 2:
      return transpose_typed(static_cast<const uint16_t*>(src), rows, cols, ld_src,
                             static_cast<uint16_t*>(dst), ld_dst);
    case 4:
      return transpose_typed(static_cast<const uint32_t*>(src), rows, cols, ld_src,
                             static_cast<uint32_t*>(dst), ld_dst);
    case 8:
      return transpose_typed(static_cast<const uint64_t*>(src), rows, cols, ld_src,
                             static_cast<uint64_t*>(dst), ld_dst);
    default:
      MIXPREC_CHECK(false, "[transpose_2d] element size ", elem_size, " is not 2, 4 or 8");
  }
}

}  // namespace mixprec::kernels
