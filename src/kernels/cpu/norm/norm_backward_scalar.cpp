// The norm backward kernels at width 1: the scalar reference level (f32 lanes) and the f64
// path, both the templates of norm_backward_impl.h.
#include "norm_backward_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::norm_backward_detail {

const NormBackwardKernels& norm_backward_scalar() {
  static constexpr NormBackwardKernels kernels = make_norm_backward_kernels<simd::Scalar>();
  return kernels;
}

const NormBackwardKernels& norm_backward_f64() {
  static constexpr NormBackwardKernels kernels =
      make_norm_backward_kernels<elementwise_detail::ScalarF64>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_backward_detail
