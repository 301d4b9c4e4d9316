// The norm kernels at 8 f32 lanes (Avx2): the templates of norm_impl.h.
#include "norm_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::norm_detail {

const NormKernels& norm_avx2() {
  static constexpr NormKernels kernels = make_norm_kernels<simd::Avx2>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_detail
