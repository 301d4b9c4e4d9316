// The optimizer kernels at 16 f32 lanes (Avx512): the templates of optim_impl.h.
#include "optim_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::optim_detail {

const OptimKernels& optim_avx512() {
  return optim_kernels<simd::Avx512, HashRandom<simd::Avx512>>();
}

}  // namespace mixprec::kernels::optim_detail
