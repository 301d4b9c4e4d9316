#pragma once
// The register-blocked micro-kernel and fused epilogue, written once against the SIMD
// interface (simd_scalar.h) and instantiated per kernel level by gemm_<isa>.cpp. Internal
// linkage throughout (see simd_avx512.h for why).
#include <array>
#include <cstdint>
#include <utility>

#include "gemm_internal.h"
#include "../simd/simd_math.h"

namespace mixprec::kernels::gemm_detail {
namespace {

template <class S>
typename S::F activate(Activation act, typename S::F v) {
  switch (act) {
    case Activation::None:
      return v;
    case Activation::ReLU:
      return S::max(S::zero(), v);  // max(0, NaN) = NaN: NaN passes
    case Activation::GeluTanh:
      return simd::gelu_tanh<S>(v);
    case Activation::GeluErf:
      return simd::gelu_erf<S>(v);
    case Activation::SiLU:
      return simd::silu<S>(v);
  }
  return v;
}

// acc holds the f32 sums of an MR x (NV * kWidth) tile; writes the first nr_eff columns.
template <class S, int MR, int NV>
inline void finish_tile(typename S::F (&acc)[MR][NV], int nr_eff, const TileEpilogue& ep) {
  constexpr int W = S::kWidth;
  const std::size_t c_size = dtype_size(ep.c_dtype);
  for (int i = 0; i < MR; ++i) {
    char* c_row = static_cast<char*>(ep.c) + static_cast<std::size_t>(i * ep.ldc) * c_size;
    for (int j = 0; j < NV; ++j) {
      const int n = nr_eff - j * W;
      if (n <= 0) break;
      typename S::F v = acc[i][j];
      if (ep.alpha != 1.0f) v = S::mul(v, S::set1(ep.alpha));
      if (ep.beta != 0.0f)
        v = S::fmadd(S::load_n(c_row + j * W * c_size, ep.c_dtype, n), S::set1(ep.beta), v);
      if (ep.bias != nullptr)
        v = S::add(v,
                   S::load_n(static_cast<const char*>(ep.bias) + j * W * dtype_size(ep.bias_dtype),
                             ep.bias_dtype, n));
      v = activate<S>(ep.activation, v);
      if (ep.residual != nullptr) {
        const std::size_t r_size = dtype_size(ep.residual_dtype);
        const char* r = static_cast<const char*>(ep.residual) +
                        (static_cast<std::size_t>(i * ep.residual_ld) + j * W) * r_size;
        v = S::add(v, S::load_n(r, ep.residual_dtype, n));
      }
      S::store_n(c_row + j * W * c_size, ep.c_dtype, v, n);
    }
  }
}

// How many k steps ahead the tile prefetches its two streams (into L1).
constexpr int kPrefetchAhead = 8;

// f32 compute: per k, NV vector loads of B and MR broadcasts of A feed MR * NV FMAs. The A
// micro-panel holds MRP rows per k (the kernel's full height); this instance uses MR of them.
template <class S, int MR, int NV, int MRP>
void tile_f32(int64_t k, const void* a_panel, const void* b_panel, int nr_eff,
              const TileEpilogue& ep) {
  constexpr int W = S::kWidth;
  constexpr int NR = NV * W;
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  typename S::F acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NV; ++j) acc[i][j] = S::zero();
  for (int64_t p = 0; p < k; ++p) {
    S::prefetch(b + (p + kPrefetchAhead) * NR);
    S::prefetch(a + (p + kPrefetchAhead) * MRP);
    typename S::F bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = S::load(b + p * NR + j * W);
    for (int i = 0; i < MR; ++i) {
      const typename S::F av = S::set1(a[p * MRP + i]);
      for (int j = 0; j < NV; ++j) acc[i][j] = S::fmadd(av, bv[j], acc[i][j]);
    }
  }
  finish_tile<S, MR, NV>(acc, nr_eff, ep);
}

// f32-compute packers, vectorised where the operand is contiguous along the packed direction
// (load_n converts f16/bf16 to f32 on the way); other strides take the generic path.
template <class S, int NR>
void pack_b_f32(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, void* out) {
  if (b.col_stride != 1) return pack_b_generic(b, n0, n1, k_padded, NR, DType::F32, out);
  constexpr int W = S::kWidth;
  const std::size_t elem = dtype_size(b.dtype);
  for (int64_t n = n0; n < n1; n += NR) {
    float* panel = static_cast<float*>(out) + (n - n0) / NR * k_padded * NR;
    const int width = static_cast<int>(n1 - n < NR ? n1 - n : NR);
    for (int64_t k = 0; k < b.rows; ++k) {
      const char* row =
          static_cast<const char*>(b.data) + static_cast<std::size_t>(k * b.row_stride + n) * elem;
      for (int v = 0; v < NR / W; ++v)
        S::store(panel + k * NR + v * W, S::load_n(row + v * W * elem, b.dtype, width - v * W));
    }
  }
}

// A rows into [k][MR] micro-panels: each k's MR values become one contiguous run.
template <class S, int MR>
void pack_a_f32(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, void* out) {
  if (a.col_stride != 1) return pack_a_generic(a, m0, rows, k_padded, MR, DType::F32, out);
  constexpr int W = S::kWidth;
  const std::size_t elem = dtype_size(a.dtype);
  for (int r0 = 0; r0 < rows; r0 += MR) {
    float* panel = static_cast<float*>(out) + r0 / MR * k_padded * MR;
    const int height = rows - r0 < MR ? rows - r0 : MR;
    for (int i = height; i < MR; ++i)
      for (int64_t k = 0; k < k_padded; ++k) panel[k * MR + i] = 0.0f;
    for (int i = 0; i < height; ++i) {
      const char* row = static_cast<const char*>(a.data) +
                        static_cast<std::size_t>((m0 + r0 + i) * a.row_stride) * elem;
      for (int64_t k = 0; k < a.cols; k += W) {  // W values of row i, widened, then spread
        const int n = static_cast<int>(a.cols - k < W ? a.cols - k : W);
        float lanes[W];
        S::store(lanes, S::load_n(row + k * elem, a.dtype, n));
        for (int l = 0; l < n; ++l) panel[(k + l) * MR + i] = lanes[l];
      }
    }
  }
}

// tiles[m - 1] = Tile<m> for m = 1..MR.
template <template <int> class Tile, std::size_t... M>
constexpr std::array<TileFn*, sizeof...(M)> tile_table(std::index_sequence<M...>) {
  return {&Tile<static_cast<int>(M) + 1>::run...};
}

// The f32 micro-kernel of level S: tiles of 1..MR rows and NV vectors of S (NV * S::kWidth
// columns), packing B with pack_b_f32 and A with pack_a (by default pack_a_f32).
template <class S, int MR, int NV>
struct F32Tiles {
  template <int M>
  struct Tile {
    static void run(int64_t k, const void* a, const void* b, int nr_eff, const TileEpilogue& ep) {
      tile_f32<S, M, NV, MR>(k, a, b, nr_eff, ep);
    }
  };
  static constexpr auto kTable = tile_table<Tile>(std::make_index_sequence<MR>{});
};

template <class S, int MR, int NV>
constexpr Ukernel f32_ukernel(PackAFn* pack_a = &pack_a_f32<S, MR>) {
  return {MR,
          NV * S::kWidth,
          DType::F32,
          F32Tiles<S, MR, NV>::kTable.data(),
          &pack_b_f32<S, NV * S::kWidth>,
          pack_a};
}

}  // namespace
}  // namespace mixprec::kernels::gemm_detail
