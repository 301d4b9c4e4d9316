// The template kernel families (level_tables.h) at 16 f32 lanes, compiled with the AVX-512
// flags.
#include "../simd/simd_avx512.h"
#include "level_tables.h"

MIXPREC_KERNEL_LEVEL(avx512, simd::Avx512)
