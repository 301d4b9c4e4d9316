// The elementwise kernels at 16 f32 lanes (Avx512): the template of elementwise_impl.h.
#include "elementwise_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::elementwise_detail {

const ElementwiseKernels& elementwise_avx512() {
  static constexpr ElementwiseKernels kernels{&run<simd::Avx512>};
  return kernels;
}

}  // namespace mixprec::kernels::elementwise_detail
