#pragma once
// A block of channels-last pixels [pixels][channels] (any storage dtype) <-> f32 rows
// [channels][row_stride], for the kernels that run vectors over pixels (convnext_mlp, the
// few-channel 1x1 convolution): one transpose_2d of the raw elements and one contiguous
// conversion per row, instead of a strided conversion per channel (which widened element by
// element). `tmp` holds channels x row_stride elements of the storage dtype (unused for f32).
// Internal linkage on purpose: the header is included by ISA units (*_avx2.cpp, *_avx512.cpp),
// and a weak inline copy compiled with their flags must never serve the others.
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/transpose.h"

namespace mixprec::kernels::layout_detail {
namespace {

inline void rows_from_pixels(const void* src, DType dtype, int64_t pixels, int64_t channels,
                             float* rows, int64_t row_stride, void* tmp) {
  if (dtype == DType::F32) {
    transpose_2d(src, pixels, channels, channels, rows, row_stride, sizeof(float));
    return;
  }
  const std::size_t es = dtype_size(dtype);
  transpose_2d(src, pixels, channels, channels, tmp, row_stride, es);
  for (int64_t k = 0; k < channels; ++k)
    convert(static_cast<const char*>(tmp) + static_cast<std::size_t>(k * row_stride) * es, dtype,
            rows + k * row_stride, DType::F32, static_cast<std::size_t>(pixels));
}

// The way back, rounding once to dtype.
inline void pixels_from_rows(const float* rows, int64_t row_stride, int64_t pixels,
                             int64_t channels, void* dst, DType dtype, void* tmp) {
  if (dtype == DType::F32) {
    transpose_2d(rows, channels, pixels, row_stride, dst, channels, sizeof(float));
    return;
  }
  const std::size_t es = dtype_size(dtype);
  for (int64_t k = 0; k < channels; ++k)
    convert(rows + k * row_stride, DType::F32,
            static_cast<char*>(tmp) + static_cast<std::size_t>(k * row_stride) * es, dtype,
            static_cast<std::size_t>(pixels));
  transpose_2d(tmp, channels, pixels, row_stride, dst, channels, es);
}

}  // namespace
}  // namespace mixprec::kernels::layout_detail
