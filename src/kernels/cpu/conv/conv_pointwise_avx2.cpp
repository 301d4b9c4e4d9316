// 1x1 convolutions with few channels at the AVX2 level (conv_pointwise_small.h): 8 pixels per
// vector.
#include "../simd/simd_avx2.h"
#include "conv_pointwise_small.h"

namespace mixprec::kernels::conv_detail {

void pointwise_block_avx2(const PointwiseBlock& a) { pointwise_block<simd::Avx2>(a); }

}  // namespace mixprec::kernels::conv_detail
