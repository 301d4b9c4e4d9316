// convnext_mlp's block kernels at the AVX2 level (convnext_impl.h): 8 pixels per vector.
#include "../simd/simd_avx2.h"
#include "convnext_impl.h"

namespace mixprec::kernels::convnext_detail {

void expand_block_avx2(const ExpandBlock& a) { expand_block<simd::Avx2>(a); }
void project_block_avx2(const ProjectBlock& a) { project_block<simd::Avx2>(a); }

}  // namespace mixprec::kernels::convnext_detail
