// The scalar-level GEMM micro-kernel: the same template as the SIMD levels at width 1, a
// 4 x 8 tile.
#include "gemm_tile.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::gemm_detail {

const Ukernel& ukernel_scalar() {
  static constexpr Ukernel kernel = f32_ukernel<simd::Scalar, 4, 8>();
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
