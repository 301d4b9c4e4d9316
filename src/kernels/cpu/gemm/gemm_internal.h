#pragma once
// What the GEMM driver (gemm.cpp) and the per-ISA micro-kernels share. Declarations only:
// the ISA translation units include this and nothing with inline code of consequence.
#include <cstddef>
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels::gemm_detail {

// The epilogue of one output tile, pointers already moved to the tile's first element.
struct TileEpilogue {
  float alpha;
  float beta;
  const void* bias;  // [nr_eff] or null
  DType bias_dtype;
  Activation activation;
  const void* residual;  // [mr_eff, nr_eff] with row stride residual_ld, or null
  DType residual_dtype;
  int64_t residual_ld;
  void* c;  // [mr_eff, nr_eff] with row stride ldc
  DType c_dtype;
  int64_t ldc;
};

// The tile epilogue of C's element (row, col) onwards: `ep` with its bias, residual and C
// pointers moved there (gemm.cpp).
TileEpilogue tile_epilogue(const GemmEpilogue& ep, const MutableMatrixView& c, int64_t row,
                           int64_t col);

// Computes an m x nr_eff tile (m fixed per function, see Ukernel::tiles): one packed A
// micro-panel times one packed B panel, accumulated in f32 registers over all of k, then the
// epilogue.
using TileFn = void(int64_t k, const void* a_panel, const void* b_panel, int nr_eff,
                    const TileEpilogue& ep);

// Packed layouts (zero-padded past the matrix):
//   B panel, nr columns:     f32 [k][nr];  bf16 [ceil(k/2)][nr][2] (k pairs, for vdpbf16ps)
//   A micro-panel, mr rows:  f32 [k][mr];  bf16 [ceil(k/2)][mr][2]
//
// Packers convert to the compute dtype on the way:
//   pack_b: columns [n0, n1) of B (n0 a multiple of nr) into panels of k_padded rows
//   pack_a: rows [m0, m0 + rows) of A into ceil(rows / mr) micro-panels
using PackBFn = void(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, void* out);
using PackAFn = void(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, void* out);

struct Ukernel {
  int mr;
  int nr;
  DType compute;         // F32 or BF16
  TileFn* const* tiles;  // tiles[m - 1] handles m rows, 1 <= m <= mr
  PackBFn* pack_b;
  PackAFn* pack_a;
};

// Element-at-a-time packers for any strides (gemm_pack.cpp): every level's fallback.
void pack_b_generic(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, int nr,
                    DType compute, void* out);
void pack_a_generic(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, int mr,
                    DType compute, void* out);

// ---- AMX-BF16 (gemm_amx.cpp), run at the amx kernel level only ----
constexpr int kAmxNr = 32;  // the bf16 panels' width the AMX block reads

// C[m0:m1, n0:n1] = epilogue(A[m0:m1, :] B[:, n0:n1]) on AMX tiles, 32 x 32 blocks of 2 x 2
// tiles. A: bf16, unit column stride, K = a.cols a multiple of 32; read in place (a partial
// 16-row tile is staged). B: bf16 panels of 32 columns, [K/2][32][2], panel (n - n0) / 32 at
// b_panels + that * panel_stride; n0 a multiple of 32.
void amx_gemm_block(const MatrixView& a, int64_t m0, int64_t m1, const char* b_panels,
                    std::size_t panel_stride, int64_t n0, int64_t n1, const MutableMatrixView& c,
                    const GemmEpilogue& ep);

const Ukernel& ukernel_scalar();
const Ukernel& ukernel_avx2();
const Ukernel& ukernel_avx512();
const Ukernel& ukernel_avx512bf16();

}  // namespace mixprec::kernels::gemm_detail
