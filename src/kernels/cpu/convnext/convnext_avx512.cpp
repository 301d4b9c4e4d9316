// convnext_mlp's block kernels at the AVX-512 level (convnext_impl.h): 16 pixels per vector,
// the small matrix products one broadcast weight and one FMA per input channel.
#include "../simd/simd_avx512.h"
#include "convnext_impl.h"

namespace mixprec::kernels::convnext_detail {

void expand_block_avx512(const ExpandBlock& a) { expand_block<simd::Avx512>(a); }
void project_block_avx512(const ProjectBlock& a) { project_block<simd::Avx512>(a); }

}  // namespace mixprec::kernels::convnext_detail
