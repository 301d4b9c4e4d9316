// 1x1 convolutions with few channels at the AVX-512 level (conv_pointwise_small.h): 16 pixels
// per vector, one broadcast weight and one FMA per input channel.
#include "../simd/simd_avx512.h"
#include "conv_pointwise_small.h"

namespace mixprec::kernels::conv_detail {

void pointwise_block_avx512(const PointwiseBlock& a) { pointwise_block<simd::Avx512>(a); }

}  // namespace mixprec::kernels::conv_detail
