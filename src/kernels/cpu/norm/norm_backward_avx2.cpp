// The norm backward kernels at 8 f32 lanes (Avx2): the templates of norm_backward_impl.h.
#include "norm_backward_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::norm_backward_detail {

const NormBackwardKernels& norm_backward_avx2() {
  static constexpr NormBackwardKernels kernels = make_norm_backward_kernels<simd::Avx2>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_backward_detail
