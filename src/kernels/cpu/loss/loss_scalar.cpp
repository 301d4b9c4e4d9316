// The loss kernels at width 1: the scalar reference level (f32 lanes) and the f64 path, both
// the templates of loss_impl.h.
#include "loss_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::loss_detail {

const LossKernels& loss_scalar() {
  static constexpr LossKernels kernels = make_loss_kernels<simd::Scalar>();
  return kernels;
}

const LossKernels& loss_f64() {
  static constexpr LossKernels kernels = make_loss_kernels<elementwise_detail::ScalarF64>();
  return kernels;
}

}  // namespace mixprec::kernels::loss_detail
