#pragma once
// The fast-path conversion kernels between f32, f16 and bf16, one set per ISA translation unit,
// and the scalar references they fall back on. Internal to src/kernels/cpu.
//
// Declarations only, on purpose. The ISA units (convert_avx2.cpp, convert_avx512.cpp,
// convert_avx512bf16.cpp) are compiled with -mavx2 / -mavx512f / ...; an inline function or a
// template they pull in from a shared header (float16.h's constexpr conversions, <algorithm>,
// ...) is emitted in their object as a weak symbol built with those instructions, and the
// linker may keep that copy for the whole program, so scalar code would execute AVX-512 on a
// CPU without it (an ODR violation the linker cannot diagnose). So: this header declares plain
// functions with external linkage and nothing else; everything else an ISA unit needs lives in
// an anonymous namespace inside it; the scalar references are ordinary non-inline functions
// defined in convert.cpp (compiled without ISA flags) and called through these declarations.
//
// 16-bit floats travel as their bits (uint16_t storage); no mixprec header is included.
#include <cstddef>
#include <cstdint>

namespace mixprec::kernels::convert_detail {

// n contiguous elements, src -> dst, no overlap unless src == dst (element-wise in place).
// `stream` asks for non-temporal stores: the caller sets it for arrays too large to stay in
// cache. A kernel may ignore it.
using ContiguousFn = void(const void* src, void* dst, std::size_t n, bool stream);

// n elements at element strides (src_stride may be negative or zero).
using StridedFn = void(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                       std::size_t n);

// One pair of kernels per (conversion, level), e.g. f32_to_bf16_avx512 and
// f32_to_bf16_strided_avx512.
#define MIXPREC_CONVERT_DECLARE(pair, level)                                                      \
  void pair##_##level(const void* src, void* dst, std::size_t n, bool stream);                    \
  void pair##_strided_##level(const void* src, int64_t src_stride, void* dst, int64_t dst_stride, \
                              std::size_t n)

#define MIXPREC_CONVERT_DECLARE_ALL_PAIRS(level) \
  MIXPREC_CONVERT_DECLARE(f32_to_f16, level);    \
  MIXPREC_CONVERT_DECLARE(f16_to_f32, level);    \
  MIXPREC_CONVERT_DECLARE(f32_to_bf16, level);   \
  MIXPREC_CONVERT_DECLARE(bf16_to_f32, level);   \
  MIXPREC_CONVERT_DECLARE(f16_to_bf16, level);   \
  MIXPREC_CONVERT_DECLARE(bf16_to_f16, level)

MIXPREC_CONVERT_DECLARE_ALL_PAIRS(scalar);  // convert.cpp: the references (float16.h rules)
MIXPREC_CONVERT_DECLARE_ALL_PAIRS(avx2);    // convert_avx2.cpp: AVX2 + F16C
MIXPREC_CONVERT_DECLARE_ALL_PAIRS(avx512);  // convert_avx512.cpp: AVX-512 F/BW/VL/DQ

// convert_avx512bf16.cpp: only the conversions that produce bf16 use vcvtneps2bf16; the
// others have no slot at that level and fall back to avx512.
MIXPREC_CONVERT_DECLARE(f32_to_bf16, avx512bf16);
MIXPREC_CONVERT_DECLARE(f16_to_bf16, avx512bf16);

// Unsigned 16-bit samples -> f32 / f16 / bf16, contiguous only (convert_u16).
void u16_to_f32_scalar(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_f16_scalar(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_bf16_scalar(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_f32_avx512(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_f16_avx512(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_bf16_avx512(const void* src, void* dst, std::size_t n, bool stream);
void u16_to_bf16_avx512bf16(const void* src, void* dst, std::size_t n, bool stream);

#undef MIXPREC_CONVERT_DECLARE_ALL_PAIRS
#undef MIXPREC_CONVERT_DECLARE

}  // namespace mixprec::kernels::convert_detail
