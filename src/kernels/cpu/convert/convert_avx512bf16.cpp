// f32 -> bf16 and f16 -> bf16 with AVX512_BF16's vcvtneps2bf16; the other conversions have no
// kernel at this level and use the avx512 ones (IsaTable falls back to the level below).
//
// Deviation of the instruction, and its fix-up. vcvtneps2bf16 rounds to nearest even and quiets
// NaNs exactly as fp16_bits::f32_to_bf16 does, but it treats f32 *subnormal inputs as zero*
// (Intel SDM, VCVTNEPS2BF16: "Output denormals are always flushed to zero and input denormals
// are always treated as zero. MXCSR is not consulted nor updated."). Only a subnormal f32 can
// give a subnormal bf16 (both share the exponent range), so the input rule is the one that
// bites.
// Measured on this machine (AMD Zen 4): 0x00018000 -> 0x0000 instead of 0x0002, 0x007FFFFF ->
// 0x0000 instead of 0x0080, 0x80000001 -> 0x8000. The contract requires bit-exact results
// (DESIGN.md section 1, docs/NUMERICS.md), so lanes whose input is subnormal (exponent field 0,
// mantissa non-zero) are recomputed with the integer RNE formula and blended in. Zeros are
// right as they are. The check is one compare per 16 lanes; the blend runs only when a block
// actually holds a subnormal, which real data rarely does.
//
// Compiled with -mavx512bf16 and the AVX-512 flags: see convert_kernels.h for why this unit
// includes nothing with inline functions or templates of external linkage.
#include "convert_avx512_impl.h"
#include "convert_kernels.h"

namespace mixprec::kernels::convert_detail {
namespace {

struct NarrowBf16Insn {
  static __m256i narrow(__m512 v) {
    const __m256i hw = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    // |u| - 1 < 0x7FFFFF (unsigned) <=> |u| in [1, 0x7FFFFF] <=> a subnormal input.
    const __m512i magnitude =
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 subnormal = _mm512_cmplt_epu32_mask(
        _mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x007FFFFF));
    if (subnormal == 0) [[likely]]
      return hw;
    return _mm256_mask_mov_epi16(hw, subnormal, NarrowBf16Rne::narrow(v));
  }
};

}  // namespace

MIXPREC_CONVERT_DEFINE_AVX512(f32_to_bf16, avx512bf16, LoadF32, Store16<NarrowBf16Insn>)
MIXPREC_CONVERT_DEFINE_AVX512(f16_to_bf16, avx512bf16, LoadF16, Store16<NarrowBf16Insn>)

// Integers are never subnormal: the instruction alone is exact for them.
struct NarrowBf16Integer {
  static __m256i narrow(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }
};
void u16_to_bf16_avx512bf16(const void* src, void* dst, std::size_t n, bool stream) {
  convert_contiguous<LoadU16, Store16<NarrowBf16Integer>>(src, dst, n, stream);
}

}  // namespace mixprec::kernels::convert_detail
