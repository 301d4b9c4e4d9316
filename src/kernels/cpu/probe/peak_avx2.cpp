#include "../simd/simd_avx2.h"
#include "peak_internal.h"
#include "peak_loop.h"

namespace mixprec::kernels::peak_detail {

// 12 independent chains: enough to cover FMA latency x issue width.
double fma_loop_avx2(int64_t iterations) { return fma_loop<simd::Avx2, 12>(iterations); }

}  // namespace mixprec::kernels::peak_detail
