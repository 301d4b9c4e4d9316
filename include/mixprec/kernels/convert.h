#pragma once
// Bulk dtype conversion: the kernel behind Tensor::to(DType) and every "store in 16 bits"
// path. Float -> 16-bit float conversions follow the rules in core/float16.h bit for bit on
// every ISA level; conversions to 16-bit floats from f64 and integers round once (no double
// rounding through f32). Float -> integer truncates toward zero, saturates at the integer
// type's limits and maps NaN to 0; anything -> bool is `value != 0` (NaN is true).
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels {

// n contiguous elements; src and dst must not overlap (unless src == dst and the sizes match).
void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t n);

// n elements at element strides (may be negative or zero for src).
void convert_strided(const void* src, DType src_type, int64_t src_stride, void* dst,
                     DType dst_type, int64_t dst_stride, std::size_t n);

}  // namespace mixprec::kernels
