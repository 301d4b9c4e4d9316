// The reduction kernels at 8 f32 lanes (Avx2): the templates of reduce_impl.h.
#include "reduce_impl.h"
#include "../simd/simd_avx2.h"

namespace mixprec::kernels::reduce_detail {

const ReduceKernels& reduce_avx2() {
  static constexpr ReduceKernels kernels = make_reduce_kernels<simd::Avx2>();
  return kernels;
}

}  // namespace mixprec::kernels::reduce_detail
