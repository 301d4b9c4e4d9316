#pragma once
// ISA variants of transpose_2d's square sub-block: one 64-byte cache line a side, i.e. 32 x 32
// two-byte or 16 x 16 four-byte elements, read as whole source lines and written as whole
// destination lines.
#include <cstdint>

namespace mixprec::kernels::transpose_detail {

using SubBlockFn = void(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);

void sub_block_2byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);
void sub_block_4byte_avx512(const void* src, int64_t ld_src, void* dst, int64_t ld_dst);

}  // namespace mixprec::kernels::transpose_detail
