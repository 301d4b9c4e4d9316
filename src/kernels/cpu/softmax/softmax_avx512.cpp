// The softmax kernels at 16 f32 lanes (Avx512): the templates of softmax_impl.h.
#include "../simd/simd_avx512.h"
#include "softmax_impl.h"

namespace mixprec::kernels::softmax_detail {

const SoftmaxKernels& softmax_avx512() {
  static constexpr SoftmaxKernels kernels = make_softmax_kernels<simd::Avx512>();
  return kernels;
}

}  // namespace mixprec::kernels::softmax_detail
