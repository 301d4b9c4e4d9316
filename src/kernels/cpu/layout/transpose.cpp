// transpose_2d: blocks of 256 x 256 elements, each walked as strips of one cache line of
// destination rows, made of square sub-blocks of one cache line a side.
#include "mixprec/kernels/transpose.h"

#include <algorithm>
#include <utility>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "transpose_internal.h"

namespace mixprec::kernels {
namespace {

// kSub = one 64-byte cache line of elements: a sub-block reads whole source lines and writes
// whole destination lines, so no line is left half written when power-of-two leading
// dimensions (N = 2048) make the rows in flight share one cache set.
template <typename E>
constexpr int64_t kSub = 64 / static_cast<int64_t>(sizeof(E));

// The whole-sub-block kernel of this ISA level for E, or null: unlike other tables these have
// no scalar slot, since the portable loops below are the reference and run when it is null.
template <typename E>
transpose_detail::SubBlockFn* sub_block_kernel() {
  static const IsaTable<transpose_detail::SubBlockFn> k2{
      {nullptr, nullptr, transpose_detail::sub_block_2byte_avx512, nullptr}};
  static const IsaTable<transpose_detail::SubBlockFn> k4{
      {nullptr, nullptr, transpose_detail::sub_block_4byte_avx512, nullptr}};
  if constexpr (sizeof(E) == 2) return k2();
  if constexpr (sizeof(E) == 4) return k4();
  return nullptr;
}

template <typename E>
void transpose_tile(const E* src, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t ld_src,
                    E* dst, int64_t ld_dst, transpose_detail::SubBlockFn* sub_block) {
  constexpr int64_t S = kSub<E>;
  for (int64_t r = r0; r < r1; r += S) {
    if (r + S <= r1 && c1 - c0 == S && sub_block != nullptr) {
      sub_block(src + r * ld_src + c0, ld_src, dst + c0 * ld_dst + r, ld_dst);
    } else if (r + S <= r1 && c1 - c0 == S) {
      E block[S][S];
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) block[j][i] = src[(r + i) * ld_src + c0 + j];
      for (int64_t j = 0; j < S; ++j)
        for (int64_t i = 0; i < S; ++i) dst[(c0 + j) * ld_dst + r + i] = block[j][i];
    } else {
      for (int64_t j = c0; j < c1; ++j)
        for (int64_t i = r; i < std::min(r1, r + S); ++i) dst[j * ld_dst + i] = src[i * ld_src + j];
    }
  }
}

// The narrow kernels of this ISA level for E (transpose_internal.h), or null.
template <typename E>
std::pair<transpose_detail::NarrowFn*, transpose_detail::NarrowFn*> narrow_kernels() {
  static const IsaTable<transpose_detail::NarrowFn> from2{
      {nullptr, nullptr, transpose_detail::from_pixels_2byte_avx512, nullptr}};
  static const IsaTable<transpose_detail::NarrowFn> to2{
      {nullptr, nullptr, transpose_detail::to_pixels_2byte_avx512, nullptr}};
  static const IsaTable<transpose_detail::NarrowFn> from4{
      {nullptr, nullptr, transpose_detail::from_pixels_4byte_avx512, nullptr}};
  static const IsaTable<transpose_detail::NarrowFn> to4{
      {nullptr, nullptr, transpose_detail::to_pixels_4byte_avx512, nullptr}};
  if constexpr (sizeof(E) == 2) return {from2(), to2()};
  if constexpr (sizeof(E) == 4) return {from4(), to4()};
  return {nullptr, nullptr};
}

// A dense block of pixels with a few channels, to or from channel rows (the layouts of the
// pixel-vector kernels): the narrow kernel on whole vectors of pixels, bands of them on the
// threads, the portable loop on the rest. False when the shape is not narrow.
template <typename E>
bool transpose_narrow(const E* src, int64_t rows, int64_t cols, int64_t ld_src, E* dst,
                      int64_t ld_dst) {
  const auto [from_pixels, to_pixels] = narrow_kernels<E>();
  const bool from = from_pixels != nullptr && ld_src == cols &&
                    transpose_detail::narrow_takes(cols, sizeof(E));
  const bool to = !from && to_pixels != nullptr && ld_dst == rows &&
                  transpose_detail::narrow_takes(rows, sizeof(E));
  if (!from && !to) return false;
  const int64_t channels = from ? cols : rows, pixels = from ? rows : cols;
  constexpr int64_t kVector = 64 / static_cast<int64_t>(sizeof(E));
  const int64_t vectors = pixels / kVector;
  parallel_for(0, vectors, std::max<int64_t>(1, (int64_t{1} << 15) / (kVector * channels)),
               [&](int64_t lo, int64_t hi) {
                 const int64_t p0 = lo * kVector, n = (hi - lo) * kVector;
                 if (from)
                   from_pixels(src + p0 * channels, n, channels, ld_dst, dst + p0);
                 else
                   to_pixels(src + p0, n, channels, ld_src, dst + p0 * channels);
               });
  for (int64_t p = vectors * kVector; p < pixels; ++p)
    for (int64_t k = 0; k < channels; ++k) {
      if (from)
        dst[k * ld_dst + p] = src[p * ld_src + k];
      else
        dst[p * ld_dst + k] = src[k * ld_src + p];
    }
  return true;
}

// Blocks of kBlock x kBlock elements, walked tile by tile: a block touches kBlock pages or
// fewer on each side, which stay in the TLB (a band of 32 source rows across a wide matrix
// writes one line to each of thousands of destination pages, a TLB miss per line).
template <typename E>
void transpose_typed(const E* src, int64_t rows, int64_t cols, int64_t ld_src, E* dst,
                     int64_t ld_dst) {
  if (transpose_narrow(src, rows, cols, ld_src, dst, ld_dst)) return;
  constexpr int64_t kBlock = 256;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock,
                col_blocks = (cols + kBlock - 1) / kBlock;
  const int64_t block_elems = std::min(rows, kBlock) * std::min(cols, kBlock);
  transpose_detail::SubBlockFn* sub_block = sub_block_kernel<E>();
  parallel_for(
      0, row_blocks * col_blocks,
      std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, block_elems)),
      [&](int64_t lo, int64_t hi) {
        for (int64_t b = lo; b < hi; ++b) {
          const int64_t br0 = b / col_blocks * kBlock, bc0 = b % col_blocks * kBlock;
          const int64_t br1 = std::min(rows, br0 + kBlock), bc1 = std::min(cols, bc0 + kBlock);
          for (int64_t c0 = bc0; c0 < bc1; c0 += kSub<E>)
            transpose_tile(src, br0, br1, c0, std::min(bc1, c0 + kSub<E>), ld_src, dst, ld_dst,
                           sub_block);
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
