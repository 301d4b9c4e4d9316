#pragma once
// ISA variants of transpose_2d's square sub-block: one 64-byte cache line a side, i.e. 32 x 32
// two-byte or 16 x 16 four-byte elements, read as whole source lines and written as whole
// destination lines.
#include <cstddef>
#include <cstdint>

namespace mixprec::kernels::transpose_detail {

using SubBlockFn = void(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);

void sub_block_2byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);
void sub_block_4byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);

// Narrow matrices, where a sub-block would be mostly empty: a block of pixels with a few
// channels ([pixels][C], C a power of two from 2 to half a register's elements: 2-16 two-byte,
// 2-8 four-byte) to or from C rows of pixels. Each handles whole vectors of pixels (32 two-byte
// or 16 four-byte) and returns how many it did; the caller finishes the rest.
//   from_pixels: dense src [pixels][C] -> dst [C][ld_dst]
//   to_pixels:   src [C][ld_src] -> dense dst [pixels][C]
using NarrowFn = int64_t(const void* src, int64_t pixels, int64_t channels, int64_t ld, void* dst);
int64_t from_pixels_2byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_dst,
                                 void* dst);
int64_t from_pixels_4byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_dst,
                                 void* dst);
int64_t to_pixels_2byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_src,
                               void* dst);
int64_t to_pixels_4byte_avx512(const void* src, int64_t pixels, int64_t channels, int64_t ld_src,
                               void* dst);
// The channel counts they take, for an element of `bytes`.
inline bool narrow_takes(int64_t channels, std::size_t bytes) {
  return channels >= 2 && (channels & (channels - 1)) == 0 &&
         channels <= static_cast<int64_t>(32 / bytes);
}

}  // namespace mixprec::kernels::transpose_detail
