// AVX2 + FMA GEMM micro-kernel: 6 x 16 f32 tile, 12 of the 16 ymm registers accumulate.
#include "gemm_tile.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::gemm_detail {

const Ukernel& ukernel_avx2() {
  static constexpr Ukernel kernel = f32_ukernel<simd::Avx2, 6, 2>();
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
