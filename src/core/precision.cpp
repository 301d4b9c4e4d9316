#include "mixprec/core/precision.h"

namespace mixprec {

PrecisionChoice recommended_precision(const CpuFeatures& f) {
  if (f.os_amx && f.amx_bf16)
    return {DType::BF16, "AMX-BF16 present: bf16 tile matrix multiply, f32 accumulation"};
  if (f.os_avx512 && f.avx512_bf16)
    return {DType::BF16,
            "AVX512_BF16 present: bf16 dot products (vdpbf16ps) at twice the f32 FMA rate, "
            "f32 accumulation"};
  if (f.os_avx && f.f16c)
    return {DType::F16,
            "F16C present but no native bf16 math: f16 storage halves memory traffic, compute "
            "stays f32"};
  return {DType::F32, "no F16C or bf16 instructions: 16-bit storage would cost conversions"};
}

}  // namespace mixprec
