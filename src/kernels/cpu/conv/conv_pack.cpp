// Convolution weights into the GEMM's panel layout (conv_internal.h): straight from OIHW,
// converted to the compute dtype, split over threads by panel.
#include <algorithm>
#include <type_traits>

#include "conv_internal.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels::conv_detail {
namespace {

// Group `grp` of OIHW weights w into GEMM panels: B [K = KH*KW*Cg, Og] with k = tap * Cg + c,
// element (k, o) = w[grp * Og + o][c][tap], converted to the compute dtype (pack_b's layout,
// without an intermediate [O, KH, KW, Cg] copy). Each panel row (one k, or k pair, x nr
// columns) is written in order; its reads come from nr output channels' weights at the same
// (c, tap), which stay in L1 while c advances.
template <typename Src, typename Dst>
void pack_group(const Src* w, const Geometry& g, int64_t grp, PackedMatrix& packed) {
  const int64_t taps = g.kh * g.kw, k = taps * g.cg;
  const int nr = packed.nr(), kp = packed.k_pack();
  const int64_t panel_elems = packed.k_padded() * nr;
  const int64_t panels = (g.og + nr - 1) / nr;
  Dst* out = static_cast<Dst*>(packed.mutable_panels());
  auto cast = [](Src v) {
    if constexpr (std::is_same_v<Src, Dst>)
      return v;
    else
      return static_cast<Dst>(static_cast<float>(v));
  };
  // Panels are independent: threads split them when there is enough to pack.
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, k * nr));
  const int64_t total = g.o * g.cg * taps;
  // bf16 pairs for vdpbf16ps / AMX on AVX-512: gathered 16 output channels at a time.
  const bool gather = std::is_same_v<Src, BFloat16> && std::is_same_v<Dst, BFloat16> && kp == 2 &&
                      nr == 32 && g.cg % 2 == 0 && packed.level() >= IsaLevel::Avx512 &&
                      total * 2 < (int64_t{1} << 31);
  parallel_for(0, panels, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      if (gather) {
        pack_bf16_panel_avx512(reinterpret_cast<const uint16_t*>(w), total, grp * g.og + j * nr,
                               static_cast<int>(std::min<int64_t>(nr, g.og - j * nr)), g.cg, taps,
                               reinterpret_cast<uint32_t*>(out + j * panel_elems));
        continue;
      }
      Dst* panel = out + j * panel_elems;
      const int width = static_cast<int>(std::min<int64_t>(nr, g.og - j * nr));
      if (packed.k_padded() != k || width < nr) std::fill(panel, panel + panel_elems, Dst{});
      const Src* base = w + (grp * g.og + j * nr) * g.cg * taps;  // [width][Cg][taps]
      const int64_t o_stride = g.cg * taps;
      for (int64_t c = 0; c < g.cg; ++c)
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t kk = t * g.cg + c;
          Dst* row = panel + (kk / kp) * nr * kp + kk % kp;
          const Src* src = base + c * taps + t;
          for (int o = 0; o < width; ++o) row[o * kp] = cast(src[o * o_stride]);
        }
    }
  });
}

}  // namespace

// Weights of every group packed as GEMM B [K = KH*KW*Cg, Og], rows in gather order (ky, kx, c).
std::vector<PackedMatrix> pack_groups(const Tensor& weight, DType x_dtype, const Geometry& g) {
  const Tensor w = weight.contiguous();
  std::vector<PackedMatrix> packed;
  packed.reserve(static_cast<std::size_t>(g.groups));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    packed.push_back(allocate_packed_b(g.kh * g.kw * g.cg, g.og, w.dtype(), x_dtype));
    PackedMatrix& b = packed.back();
    auto fill = [&](auto src_tag) {
      using Src = typename decltype(src_tag)::type;
      const Src* src = w.data<Src>();
      if (b.compute_dtype() == DType::BF16) {
        MIXPREC_ASSERT(w.dtype() == DType::BF16);
        pack_group<Src, Src>(src, g, grp, b);
      } else {
        pack_group<Src, float>(src, g, grp, b);
      }
    };
    switch (w.dtype()) {
      case DType::F32:
        fill(TypeTag<float>{});
        break;
      case DType::BF16:
        fill(TypeTag<BFloat16>{});
        break;
      case DType::F16:
        fill(TypeTag<Half>{});
        break;
      default:
        MIXPREC_ASSERT(false && "conv weights reach packing only as f32, f16 or bf16");
    }
  }
  return packed;
}

}  // namespace mixprec::kernels::conv_detail
