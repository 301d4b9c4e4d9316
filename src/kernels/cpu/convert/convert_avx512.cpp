// f32 <-> f16 <-> bf16 conversion kernels for AVX-512 F/BW/VL/DQ, 16 lanes per step (32 per
// loop iteration, one cache line of 16-bit output). Bit-exact with the scalar rules of
// core/float16.h: vcvtps2ph / vcvtph2ps follow them exactly when given an explicit RNE
// immediate, and f32 -> bf16 uses the same integer rounding formula as the scalar code.
//
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq: include nothing that defines inline
// functions or templates with external linkage (see convert_kernels.h for why).
#include "convert_avx512_impl.h"
#include "convert_kernels.h"

namespace mixprec::kernels::convert_detail {

MIXPREC_CONVERT_DEFINE_AVX512(f32_to_f16, avx512, LoadF32, Store16<NarrowF16>)
MIXPREC_CONVERT_DEFINE_AVX512(f16_to_f32, avx512, LoadF16, StoreF32)
MIXPREC_CONVERT_DEFINE_AVX512(f32_to_bf16, avx512, LoadF32, Store16<NarrowBf16Rne>)
MIXPREC_CONVERT_DEFINE_AVX512(bf16_to_f32, avx512, LoadBf16, StoreF32)
MIXPREC_CONVERT_DEFINE_AVX512(f16_to_bf16, avx512, LoadF16, Store16<NarrowBf16Rne>)
MIXPREC_CONVERT_DEFINE_AVX512(bf16_to_f16, avx512, LoadBf16, Store16<NarrowF16>)


void u16_to_f32_avx512(const void* src, void* dst, std::size_t n, bool stream) {
  convert_contiguous<LoadU16, StoreF32>(src, dst, n, stream);
}
void u16_to_f16_avx512(const void* src, void* dst, std::size_t n, bool stream) {
  convert_contiguous<LoadU16, Store16<NarrowF16>>(src, dst, n, stream);
}
void u16_to_bf16_avx512(const void* src, void* dst, std::size_t n, bool stream) {
  convert_contiguous<LoadU16, Store16<NarrowBf16Rne>>(src, dst, n, stream);
}

}  // namespace mixprec::kernels::convert_detail
