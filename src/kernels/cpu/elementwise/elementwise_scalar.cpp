// The elementwise kernels at width 1: the scalar reference level (f32 lanes) and the f64 path,
// both the template of elementwise_impl.h.
#include "elementwise_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::elementwise_detail {

const ElementwiseKernels& elementwise_scalar() {
  static constexpr ElementwiseKernels kernels{&run<simd::Scalar>};
  return kernels;
}

const ElementwiseKernels& elementwise_f64() {
  static constexpr ElementwiseKernels kernels{&run<ScalarF64>};
  return kernels;
}

}  // namespace mixprec::kernels::elementwise_detail
