// The optimizer kernels at 8 f32 lanes (Avx2): the templates of optim_impl.h.
#include "optim_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::optim_detail {

const OptimKernels& optim_avx2() { return optim_kernels<simd::Avx2, HashRandom<simd::Avx2>>(); }

}  // namespace mixprec::kernels::optim_detail
