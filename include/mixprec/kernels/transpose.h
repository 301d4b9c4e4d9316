#pragma once
// Out-of-place 2-D transpose of raw elements (2, 4 or 8 bytes): dst[c, r] = src[r, c] for a
// row-major src [rows, cols] with leading dimension ld_src into dst [cols, rows] with leading
// dimension ld_dst. Pure data movement (no conversion), in square tiles that stay in L1, split
// over threads by bands of source rows. Backward passes use it to hand the GEMM row-major
// operands (dY^T, g^T) instead of strided views, which pack element by element.
#include <cstddef>
#include <cstdint>

namespace mixprec::kernels {

void transpose_2d(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst,
                  int64_t ld_dst, std::size_t elem_size);

}  // namespace mixprec::kernels
