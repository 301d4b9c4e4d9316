// The optimizer kernels at width 1: the scalar reference level (f32 lanes) and the f64 path,
// both the templates of optim_impl.h.
#include "optim_impl.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::optim_detail {

const OptimKernels& optim_scalar() {
  return optim_kernels<simd::Scalar, HashRandom<simd::Scalar>>();
}
const OptimKernels& optim_f64() { return optim_kernels<ScalarF64, NoRandom>(); }

}  // namespace mixprec::kernels::optim_detail
