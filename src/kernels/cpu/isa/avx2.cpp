// The template kernel families (level_tables.h) at 8 f32 lanes, compiled with the AVX2 flags.
#include "../simd/simd_avx2.h"
#include "level_tables.h"

MIXPREC_KERNEL_LEVEL(avx2, simd::Avx2)
