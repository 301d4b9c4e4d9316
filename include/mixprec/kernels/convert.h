#pragma once
// Bulk dtype conversion: the kernel behind Tensor::to(DType) and every "store in 16 bits"
// path. The rules (docs/NUMERICS.md has the full table):
//  - float -> 16-bit float follows core/float16.h bit for bit on every ISA level: round to
//    nearest even, overflow to +-inf, subnormals kept, NaN -> quiet NaN with the top payload
//    bits;
//  - f64 and integers -> f16/bf16 round once (no double rounding through f32);
//  - float -> integer truncates toward zero, saturates at the integer type's limits, NaN -> 0;
//  - integer -> narrower integer wraps (two's complement), as static_cast, NumPy and PyTorch;
//  - anything -> bool is `value != 0` (NaN is true, -0 is false); bool -> anything is 0 or 1;
//  - the same dtype is a copy: every bit is kept, signaling NaNs included.
// f32 <-> f16, f32 <-> bf16 and f16 <-> bf16 have SIMD fast paths (AVX2+F16C, AVX-512,
// AVX512_BF16) picked per call from active_isa(); large arrays are split across threads
// (parallel_for) and written with non-temporal stores.
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels {

// n contiguous elements; src and dst must not overlap, except src == dst with equal element
// sizes (an in-place conversion, e.g. f16 <-> bf16).
void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n);

// n elements at element strides: src_stride may be negative or zero (a broadcast), dst_stride
// negative. Same overlap rule as convert(), with equal strides for in place.
void convert_strided(const void* src, DType src_type, int64_t src_stride, void* dst, DType dst_type,
                     int64_t dst_stride, std::size_t n);

// A rows x cols matrix whose rows are src_ld and dst_ld elements apart (columns contiguous), on
// the calling thread: one kernel lookup for all rows, for the small blocks of kernels that
// are already parallel (attention's per-head outputs), where a convert() per row would spend
// more on its lookup than on the row. Same overlap rule as convert().
void convert_rows(const void* src, DType src_type, int64_t src_ld, void* dst, DType dst_type,
                  int64_t dst_ld, int64_t rows, int64_t cols);

// n unsigned 16-bit samples (a detector's raw ADU; DType has no u16) -> n elements of f32, f16
// or bf16 at dst, each rounded once from its exact value: the same bits as converting the
// (exact) f32 value, without an f32 copy. src may be unaligned. AVX-512 widens 16 lanes and
// narrows them in registers (vcvtneps2bf16 for bf16 where AVX512_BF16 exists: integers are
// never subnormal, so its flush-to-zero cannot bite). Other dst types: an Error.
void convert_u16(const uint16_t* src, void* dst, DType dst_type, std::size_t n);

}  // namespace mixprec::kernels
