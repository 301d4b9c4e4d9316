// The norm kernels at width 1: the scalar reference level (f32 lanes) and the f64 path, both
// the templates of norm_impl.h.
#include "norm_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::norm_detail {

const NormKernels& norm_scalar() {
  static constexpr NormKernels kernels = make_norm_kernels<simd::Scalar>();
  return kernels;
}

const NormKernels& norm_f64() {
  static constexpr NormKernels kernels = make_norm_kernels<elementwise_detail::ScalarF64>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_detail
