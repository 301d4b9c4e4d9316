// AVX-512 GEMM micro-kernel: 14 x 32 f32 tile, 28 of the 32 zmm registers accumulate, two
// hold the B row and one the broadcast of A.
#include "gemm_pack_avx512.h"
#include "gemm_tile.h"
#include "../simd/simd_avx512.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kMr = 14;
constexpr int kNv = 2;

// A rows (f32, f16 or bf16, k contiguous) into [k][kMr] f32 micro-panels: widen 16 values of
// each row, then transpose them into place (gemm_pack_avx512.h).
void pack_a(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, void* out) {
  if (a.col_stride != 1) return pack_a_generic(a, m0, rows, k_padded, kMr, DType::F32, out);
  const std::size_t elem = dtype_size(a.dtype);
  for (int r0 = 0; r0 < rows; r0 += kMr) {
    uint32_t* panel = static_cast<uint32_t*>(out) + r0 / kMr * k_padded * kMr;
    const int height = rows - r0 < kMr ? rows - r0 : kMr;
    const char* base = static_cast<const char*>(a.data) +
                       static_cast<std::size_t>((m0 + r0) * a.row_stride) * elem;
    pack_panel_words(height, kMr, a.cols, panel, [&](int i, int64_t k0, int n) {
      const char* row = base + static_cast<std::size_t>(i * a.row_stride + k0) * elem;
      // The next panel's row, as the bf16 packing does (gemm_avx512bf16.cpp).
      _mm_prefetch(row + static_cast<std::size_t>(kMr * a.row_stride) * elem, _MM_HINT_T0);
      return _mm512_castps_si512(simd::Avx512::load_n(row, a.dtype, n));
    });
  }
}

}  // namespace

const Ukernel& ukernel_avx512() {
  static constexpr Ukernel kernel = f32_ukernel<simd::Avx512, kMr, kNv>(&pack_a);
  return kernel;
}

}  // namespace mixprec::kernels::gemm_detail
