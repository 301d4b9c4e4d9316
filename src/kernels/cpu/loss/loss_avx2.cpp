// The loss kernels at 8 f32 lanes (Avx2): the templates of loss_impl.h.
#include "loss_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::loss_detail {

const LossKernels& loss_avx2() {
  static constexpr LossKernels kernels = make_loss_kernels<simd::Avx2>();
  return kernels;
}

}  // namespace mixprec::kernels::loss_detail
