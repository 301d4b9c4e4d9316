// The softmax kernels at 8 f32 lanes (Avx2): the templates of softmax_impl.h.
#include "../simd/simd_avx2.h"
#include "softmax_impl.h"

namespace mixprec::kernels::softmax_detail {

const SoftmaxKernels& softmax_avx2() {
  static constexpr SoftmaxKernels kernels = make_softmax_kernels<simd::Avx2>();
  return kernels;
}

}  // namespace mixprec::kernels::softmax_detail
