// The elementwise kernels at 8 f32 lanes (Avx2): the template of elementwise_impl.h.
#include "elementwise_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::elementwise_detail {

const ElementwiseKernels& elementwise_avx2() {
  static constexpr ElementwiseKernels kernels{&run<simd::Avx2>};
  return kernels;
}

}  // namespace mixprec::kernels::elementwise_detail
