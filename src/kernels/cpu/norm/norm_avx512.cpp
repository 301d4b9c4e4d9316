// The norm kernels at 16 f32 lanes (Avx512): the templates of norm_impl.h.
#include "norm_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::norm_detail {

const NormKernels& norm_avx512() {
  static constexpr NormKernels kernels = make_norm_kernels<simd::Avx512>();
  return kernels;
}

}  // namespace mixprec::kernels::norm_detail
