// conv2d front-end and backward. The backward works in NHWC like the forward:
//   dY [M = N*OH*OW, O] (per group a column block), W_g [Og, K = KH*KW*Cg]
//   dX: dCols [M, K] = dY_g W_g, then col2im adds every patch row back into dX (f32)
//   dW: dW_g [Og, K] = dY_g^T Cols [M, K] (the forward's patches, gathered again)
//   db: sum of dY over N, OH, OW
#include "mixprec/ops/conv.h"

#include <algorithm>
#include <cstring>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/autograd/node.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/ops/reduce.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::MatrixView;
using kernels::MutableMatrixView;

kernels::Conv2dOptions kernel_options(const Conv2dParams& p) {
  kernels::Conv2dOptions o;
  o.stride_h = o.stride_w = p.stride;
  o.pad_h = o.pad_w = p.padding;
  o.dilation_h = o.dilation_w = p.dilation;
  o.groups = p.groups;
  return o;
}

struct Geometry {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups, cg, og;
  int64_t k() const { return kh * kw * cg; }
  int64_t m() const { return n * oh * ow; }
};

// The patch row of output pixel `pix` for group `grp`, in (ky, kx, c) order; zeros outside
// the image. x is NHWC in the backward's accumulation type T (f32, or f64 for f64 models).
template <typename T>
void gather_row(const T* x, const Geometry& g, const Conv2dParams& p, int64_t grp, int64_t pix,
                T* row) {
  const int64_t n = pix / (g.oh * g.ow), oy = pix / g.ow % g.oh, ox = pix % g.ow;
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t iy = oy * p.stride - p.padding + ky * p.dilation;
      const int64_t ix = ox * p.stride - p.padding + kx * p.dilation;
      T* cell = row + (ky * g.kw + kx) * g.cg;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
        std::fill(cell, cell + g.cg, T{0});
      } else {
        const T* src = x + ((n * g.h + iy) * g.w + ix) * g.c + grp * g.cg;
        std::copy(src, src + g.cg, cell);
      }
    }
}

// Adds a patch row back into dX (NHWC): the adjoint of gather_row.
template <typename T>
void scatter_row(T* dx, const Geometry& g, const Conv2dParams& p, int64_t grp, int64_t pix,
                 const T* row) {
  const int64_t n = pix / (g.oh * g.ow), oy = pix / g.ow % g.oh, ox = pix % g.ow;
  for (int64_t ky = 0; ky < g.kh; ++ky)
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t iy = oy * p.stride - p.padding + ky * p.dilation;
      const int64_t ix = ox * p.stride - p.padding + kx * p.dilation;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
      T* dst = dx + ((n * g.h + iy) * g.w + ix) * g.c + grp * g.cg;
      const T* cell = row + (ky * g.kw + kx) * g.cg;
      for (int64_t c = 0; c < g.cg; ++c) dst[c] += cell[c];
    }
}

struct Conv2dBackward final : autograd::Node {
  Tensor x, weight;  // as given (detached)
  Conv2dParams p;
  Geometry g;
  DType bias_dtype = DType::F32;
  std::string_view name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    // NHWC copies in the accumulation type: the backward sums in f32 (f64 for f64 models) and
    // rounds once into each gradient.
    if (x.dtype() == DType::F64) return run<double>(grads[0], DType::F64);
    return run<float>(grads[0], DType::F32);
  }

  template <typename T>
  std::vector<Tensor> run(const Tensor& grad, DType acc) {
    const Tensor dy = grad.to(acc).contiguous(MemoryFormat::ChannelsLast);  // [M, O]
    const Tensor xs = x.to(acc).contiguous(MemoryFormat::ChannelsLast);
    const Tensor wr = weight.to(acc).permute({0, 2, 3, 1}).contiguous();  // [O, KH, KW, Cg]
    const int64_t m = g.m(), k = g.k();
    Tensor dx, dw, db;
    const bool want_dx = next_edges[0].valid(), want_dw = next_edges[1].valid();
    Tensor dx_acc = want_dx ? Tensor::zeros({g.n, g.h, g.w, g.c}, acc) : Tensor();
    Tensor dw_acc = want_dw ? Tensor::empty({g.o, k}, acc) : Tensor();  // [O, KH*KW*Cg]
    Tensor cols = Tensor::empty({m, k}, acc);
    T* cols_p = cols.data<T>();
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const MatrixView dy_g{dy.data<T>() + grp * g.og, acc, m, g.og, g.o, 1};
      const MatrixView w_g = MatrixView::row_major(wr.data<T>() + grp * g.og * k, acc, g.og, k, k);
      if (want_dx) {
        kernels::gemm(dy_g, w_g, MutableMatrixView::row_major(cols_p, acc, m, k, k));
        for (int64_t pix = 0; pix < m; ++pix)
          scatter_row(dx_acc.data<T>(), g, p, grp, pix, cols_p + pix * k);
      }
      if (want_dw) {
        for (int64_t pix = 0; pix < m; ++pix)
          gather_row(xs.data<T>(), g, p, grp, pix, cols_p + pix * k);
        kernels::gemm(
            dy_g.transposed(), MatrixView::row_major(cols_p, acc, m, k, k),
            MutableMatrixView::row_major(dw_acc.data<T>() + grp * g.og * k, acc, g.og, k, k));
      }
    }
    if (want_dx) {  // NHWC storage -> [N, C, H, W] in x's dtype and layout
      dx = Tensor::empty_like(x, MemoryFormat::Preserve);
      dx.copy_(dx_acc.permute({0, 3, 1, 2}));
    }
    if (want_dw)
      dw = dw_acc.view({g.o, g.kh, g.kw, g.cg})
               .permute({0, 3, 1, 2})
               .contiguous()
               .to(weight.dtype());
    if (next_edges[2].valid()) db = sum(grad.to(acc), {0, 2, 3}).to(bias_dtype);
    return {dx, dw, db};
  }
  void release_saved() override { x = weight = Tensor(); }
};

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dParams& p) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::Conv2d, x_in, weight_in, bias_in);
  ops_detail::check_float("conv2d", x);
  ops_detail::check_float("conv2d", weight);
  MIXPREC_CHECK(x.dim() == 4 && weight.dim() == 4,
                "[conv2d] expected x [N, C, H, W] and weight [O, C/g, KH, KW], got ",
                shape_to_string(x.shape()), " and ", shape_to_string(weight.shape()));
  const kernels::Conv2dOptions ko = kernel_options(p);
  Geometry g{
      x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3), 0,
      0,         p.groups,  0,         0};
  g.oh = kernels::conv_output_size(g.h, g.kh, p.stride, p.padding, p.dilation);
  g.ow = kernels::conv_output_size(g.w, g.kw, p.stride, p.padding, p.dilation);
  MIXPREC_CHECK(p.groups >= 1 && g.c % p.groups == 0 && g.o % p.groups == 0, "[conv2d] groups ",
                p.groups, " must divide channels ", g.c, " and ", g.o);
  g.cg = g.c / p.groups;
  g.og = g.o / p.groups;
  const MemoryFormat format = x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous()
                                  ? MemoryFormat::ChannelsLast
                                  : MemoryFormat::Contiguous;
  Tensor out = Tensor::empty({g.n, g.o, g.oh, g.ow}, x.dtype(), format);
  {
    NoGrad no_grad;
    kernels::conv2d(x, weight, bias.defined() ? &bias : nullptr, out, ko);
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = x.detach();
    node->weight = weight.detach();
    node->p = p;
    node->g = g;
    if (bias.defined()) node->bias_dtype = bias.dtype();
    autograd::record(node, {&x, &weight, &bias}, {&out});
  }
  return out;
}

}  // namespace mixprec
