#pragma once
// The element types detector data arrives in (HDF5 datasets, later ZeroMQ messages), and their
// one conversion into the dtype a finder or network works in.
//
// Detectors write uint16 (ePix10k, Jungfrau raw), int32 or float32 (calibrated), sometimes
// others. mixprec's DType has no 16-bit integers, so convert_samples() widens those exactly
// (u8/i8/u16/i16 -> i32, u32 -> i64) in small cache-resident blocks and hands each block to the
// engine's conversion kernel (kernels/convert.h): every value is rounded once, straight into
// the caller's buffer, with no frame-sized f32 copy on the way. Types DType has (u8, i32, i64,
// f32, f64) go to the kernel directly, and so does u16 into f32, f16 or bf16
// (kernels::convert_u16: widened and narrowed in registers).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mixprec/core/dtype.h"

namespace mixprec::stream {

enum class SampleType : uint8_t { U8, I8, U16, I16, U32, I32, I64, F32, F64 };

std::string_view sample_type_name(SampleType type);  // "u16", "f32", ...
std::size_t sample_size(SampleType type);
// The DType with the same values, when there is one (U8, I32, I64, F32, F64).
std::optional<DType> sample_dtype(SampleType type);

// n samples at src (any alignment) -> n elements of dst_type at dst.
void convert_samples(const void* src, SampleType src_type, void* dst, DType dst_type, std::size_t n);

}  // namespace mixprec::stream
