#include "../simd/simd_avx512.h"
#include "peak_internal.h"
#include "peak_loop.h"

namespace mixprec::kernels::peak_detail {

double fma_loop_avx512(int64_t iterations) { return fma_loop<simd::Avx512, 16>(iterations); }

}  // namespace mixprec::kernels::peak_detail
