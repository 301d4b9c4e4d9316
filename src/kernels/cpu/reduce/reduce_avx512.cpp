// The reduction kernels at 16 f32 lanes (Avx512): the templates of reduce_impl.h.
#include "reduce_impl.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::reduce_detail {

const ReduceKernels& reduce_avx512() {
  static constexpr ReduceKernels kernels = make_reduce_kernels<simd::Avx512>();
  return kernels;
}

}  // namespace mixprec::kernels::reduce_detail
