// The reduction kernels at width 1: the scalar reference level (f32 lanes) and the f64 path,
// both the templates of reduce_impl.h.
#include "reduce_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::reduce_detail {

const ReduceKernels& reduce_scalar() {
  static constexpr ReduceKernels kernels = make_reduce_kernels<simd::Scalar>();
  return kernels;
}

const ReduceKernels& reduce_f64() {
  static constexpr ReduceKernels kernels = make_reduce_kernels<elementwise_detail::ScalarF64>();
  return kernels;
}

}  // namespace mixprec::kernels::reduce_detail
