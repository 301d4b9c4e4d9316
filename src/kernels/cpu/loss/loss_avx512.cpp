// The loss kernels at 16 f32 lanes (Avx512): the templates of loss_impl.h.
#include "loss_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::loss_detail {

const LossKernels& loss_avx512() {
  static constexpr LossKernels kernels = make_loss_kernels<simd::Avx512>();
  return kernels;
}

}  // namespace mixprec::kernels::loss_detail
