// The softmax kernels at width 1: the scalar reference level (f32 lanes) and the f64 path,
// both the templates of softmax_impl.h.
#include "../simd/simd_scalar.h"
#include "softmax_impl.h"

namespace mixprec::kernels::softmax_detail {

const SoftmaxKernels& softmax_scalar() {
  static constexpr SoftmaxKernels kernels = make_softmax_kernels<simd::Scalar>();
  return kernels;
}

const SoftmaxKernels& softmax_f64() {
  static constexpr SoftmaxKernels kernels = make_softmax_kernels<elementwise_detail::ScalarF64>();
  return kernels;
}

}  // namespace mixprec::kernels::softmax_detail
