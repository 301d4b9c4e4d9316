#pragma once
// What the GEMM driver (gemm.cpp) and the per-ISA micro-kernels share. Declarations only:
// the ISA translation units include this and nothing with inline code of consequence.
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

// Computes an mr_eff x nr_eff tile: A rows (compute dtype, row stride lda, k contiguous)
// times one packed B panel, accumulated in f32 registers over all of k, then the epilogue.
using TileFn = void(int64_t k, const void* a, int64_t lda, const void* b_panel, int nr_eff,
                    const TileEpilogue& ep);

// B panel layouts (each panel covers nr columns, zero-padded past N):
//   f32  compute: [k][nr] f32
//   bf16 compute: [ceil(k/2)][nr][2] bf16 (k pairs interleaved, for vdpbf16ps; odd k padded)
//
// Packers convert to the compute dtype on the way:
//   pack_b: columns [n0, n1) of B (n0 a multiple of nr) into panels of k_padded rows
//   pack_a: rows [m0, m0 + rows) of A into a row-major [rows][k_padded] block
using PackBFn = void(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, void* out);
using PackAFn = void(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, void* out);

struct Ukernel {
  int mr;
  int nr;
  DType compute;          // F32 or BF16
  TileFn* const* tiles;   // tiles[m - 1] handles m rows, 1 <= m <= mr
  PackBFn* pack_b;
  PackAFn* pack_a;
};

// Element-at-a-time packers for any strides (gemm_pack.cpp): every level's fallback.
void pack_b_generic(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, int nr,
                    DType compute, void* out);
void pack_a_generic(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, DType compute,
                    void* out);

const Ukernel& ukernel_scalar();
const Ukernel& ukernel_avx2();
const Ukernel& ukernel_avx512();
const Ukernel& ukernel_avx512bf16();

}  // namespace mixprec::kernels::gemm_detail
