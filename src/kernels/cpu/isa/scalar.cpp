// The scalar reference level (width 1, f32 lanes) and the f64 path of the template kernel
// families (level_tables.h). No instruction-set flags: this runs on any x86-64.
#include "../simd/simd_scalar.h"
#include "level_tables.h"

MIXPREC_KERNEL_LEVEL(scalar, simd::Scalar)
MIXPREC_LEVEL_TABLES(f64, elementwise_detail::ScalarF64)
