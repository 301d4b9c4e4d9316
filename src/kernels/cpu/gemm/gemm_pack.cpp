// Packing for any strides, one element at a time: the fallback of every kernel level when an
// operand is neither row- nor column-contiguous in the way its fast packer wants.
#include <algorithm>
#include <type_traits>

#include "gemm_internal.h"
#include "mixprec/core/error.h"

namespace mixprec::kernels::gemm_detail {
namespace {

template <typename Dst, typename Src>
Dst to_compute(Src v) {
  if constexpr (std::is_same_v<Src, Dst>)
    return v;
  else
    return static_cast<Dst>(static_cast<float>(v));
}

// Element (k, j) of a panel sits at (k / kpack) * nr * kpack + j * kpack + k % kpack.
template <typename Src, typename Dst>
void pack_b_typed(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, int nr, Dst* out) {
  constexpr int kpack = sizeof(Dst) == 2 ? 2 : 1;  // bf16 compute interleaves k pairs
  const Src* src = static_cast<const Src*>(b.data);
  for (int64_t n = n0; n < n1; n += nr) {
    Dst* panel = out + (n - n0) / nr * k_padded * nr;
    const int width = static_cast<int>(std::min<int64_t>(nr, n1 - n));
    std::fill(panel, panel + k_padded * nr, Dst{});
    for (int j = 0; j < width; ++j)
      for (int64_t k = 0; k < b.rows; ++k)
        panel[(k / kpack) * nr * kpack + j * kpack + k % kpack] =
            to_compute<Dst>(src[k * b.row_stride + (n + j) * b.col_stride]);
  }
}

// Element (i, k) of a micro-panel sits at (k / kpack) * mr * kpack + i * kpack + k % kpack.
template <typename Src, typename Dst>
void pack_a_typed(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, int mr, Dst* out) {
  constexpr int kpack = sizeof(Dst) == 2 ? 2 : 1;
  const Src* src = static_cast<const Src*>(a.data);
  for (int r0 = 0; r0 < rows; r0 += mr) {
    Dst* panel = out + r0 / mr * k_padded * mr;
    const int height = std::min(mr, rows - r0);
    std::fill(panel, panel + k_padded * mr, Dst{});
    for (int i = 0; i < height; ++i)
      for (int64_t k = 0; k < a.cols; ++k)
        panel[(k / kpack) * mr * kpack + i * kpack + k % kpack] =
            to_compute<Dst>(src[(m0 + r0 + i) * a.row_stride + k * a.col_stride]);
  }
}

// Calls f(TypeTag<Src>{}, TypeTag<Dst>{}) for the (source, compute) dtype pair.
template <typename F>
void visit_pack_types(DType src, DType compute, const F& f) {
  if (compute == DType::BF16) {
    MIXPREC_ASSERT(src == DType::BF16);
    return f(TypeTag<BFloat16>{}, TypeTag<BFloat16>{});
  }
  switch (src) {
    case DType::F32:
      return f(TypeTag<float>{}, TypeTag<float>{});
    case DType::F16:
      return f(TypeTag<Half>{}, TypeTag<float>{});
    case DType::BF16:
      return f(TypeTag<BFloat16>{}, TypeTag<float>{});
    default:
      MIXPREC_ASSERT(false && "unsupported dtype reached GEMM packing");
  }
}

}  // namespace

void pack_b_generic(const MatrixView& b, int64_t n0, int64_t n1, int64_t k_padded, int nr,
                    DType compute, void* out) {
  visit_pack_types(b.dtype, compute, [&](auto src, auto dst) {
    using Dst = typename decltype(dst)::type;
    pack_b_typed<typename decltype(src)::type, Dst>(b, n0, n1, k_padded, nr,
                                                    static_cast<Dst*>(out));
  });
}

void pack_a_generic(const MatrixView& a, int64_t m0, int rows, int64_t k_padded, int mr,
                    DType compute, void* out) {
  visit_pack_types(a.dtype, compute, [&](auto src, auto dst) {
    using Dst = typename decltype(dst)::type;
    pack_a_typed<typename decltype(src)::type, Dst>(a, m0, rows, k_padded, mr,
                                                    static_cast<Dst*>(out));
  });
}

}  // namespace mixprec::kernels::gemm_detail
