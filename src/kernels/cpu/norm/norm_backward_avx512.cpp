// The norm backward kernels at 16 f32 lanes (Avx512): the templates of norm_backward_impl.h.
#include "norm_backward_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::norm_backward_detail {

const NormBackwardKernels& norm_backward_avx512() {
  static constexpr NormBackwardKernels kernels = make_norm_backward_kernels<simd::Avx512>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_backward_detail
