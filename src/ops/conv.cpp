// conv2d front-end and backward. The backward works in NHWC like the forward, with
// dY [M = N*OH*OW, O] (per group a column block), W_g [Og, K = KH*KW*Cg] and Cols [M, K]
// the forward's patches (see Conv2dBackward below for how each gradient is formed).
#include "mixprec/ops/conv.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/conv_patches.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/transpose.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
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

// The output keeps x's memory format.
MemoryFormat output_format(const Tensor& x) {
  return x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous()
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

using Geometry = kernels::ConvGeometry;

// The backward's GEMMs run on the operands in their own dtypes (bf16 stays bf16: vdpbf16ps),
// accumulate in f32 (f64 for f64) and round once into each gradient:
//   dX, stride 1: a convolution of dY with the flipped, transposed weight (the forward kernel,
//       which rounds straight into x's dtype); other strides: dCols = dY_g W_g per chunk of
//       pixels into an f32 buffer, added back into dX (col2im) in f32, rounded once at the end.
//   dW: per chunk of pixels, dW_g += dY_g^T Cols into an f32 [O, K] accumulator. dY_g^T is
//       made contiguous ([O, pixels], a cheap transpose) and Cols gathered in x's dtype, so
//       both GEMM operands pack from row-major memory (no strided element-by-element packing).
//   db: f32 sums of dY per channel over each chunk of pixels, the chunks added in f64.

// Bytes of x's patches (Cols) gathered per chunk: a few MiB, well inside the L3.
constexpr std::size_t kColsChunkBytes = std::size_t{3} << 20;

// Adds f32/f64 patch rows of pixels [p0, p1) back into dX (NHWC, same type): col2im.
template <typename T>
void scatter_rows(T* dx, const Geometry& g, const Conv2dParams& p, int64_t grp, int64_t p0,
                  int64_t p1, const T* rows) {
  const int64_t k = g.k();
  for (int64_t pix = p0; pix < p1; ++pix) {
    const int64_t n = pix / (g.oh * g.ow), oy = pix / g.ow % g.oh, ox = pix % g.ow;
    const T* row = rows + (pix - p0) * k;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * p.stride - p.padding + ky * p.dilation;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = ox * p.stride - p.padding + kx * p.dilation;
        if (ix < 0 || ix >= g.w) continue;
        T* dst = dx + ((n * g.h + iy) * g.w + ix) * g.c + grp * g.cg;
        const T* cell = row + (ky * g.kw + kx) * g.cg;
        for (int64_t c = 0; c < g.cg; ++c) dst[c] += cell[c];
      }
    }
  }
}

// The weight of the convolution whose output is dX: W'[g Cg + c, o, ky, kx] =
// W[g Og + o, c, KH-1-ky, KW-1-kx], shape [C, Og, KH, KW], in the weight's dtype.
Tensor flipped_weight(const Tensor& weight, const Geometry& g) {
  const Tensor w = weight.contiguous();
  Tensor out = Tensor::empty({g.c, g.og, g.kh, g.kw}, w.dtype());
  const std::size_t elem = w.element_size();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t taps = g.kh * g.kw;
  for (int64_t grp = 0; grp < g.groups; ++grp)
    for (int64_t c = 0; c < g.cg; ++c)
      for (int64_t o = 0; o < g.og; ++o)
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t d = ((grp * g.cg + c) * g.og + o) * taps + t;
          const int64_t s = ((grp * g.og + o) * g.cg + c) * taps + (taps - 1 - t);
          std::memcpy(dst + static_cast<std::size_t>(d) * elem,
                      src + static_cast<std::size_t>(s) * elem, elem);
        }
  return out;
}

// Adds the column sums of a row-major [rows, width] matrix of dtype `dtype` into acc (f32, or
// f64 for f64).
template <typename T>
void add_column_sums(const void* data, DType dtype, int64_t rows, int64_t width, T* acc) {
  visit_dtype(dtype, [&](auto tag) {
    using E = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<E> || std::is_same_v<E, Half> ||
                  std::is_same_v<E, BFloat16>) {
      const E* p = static_cast<const E*>(data);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < width; ++c)
          acc[c] += static_cast<T>(static_cast<float>(p[r * width + c]));
    }
  });
}

struct Conv2dBackward final : autograd::Node {
  Tensor x, weight;  // as given (detached)
  Conv2dParams p;
  Geometry g;
  DType bias_dtype = DType::F32;
  DType residual_dtype = DType::F32;  // with a fused residual (a fourth input)
  std::string_view name() const override { return "Conv2dBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    std::vector<Tensor> out =
        x.dtype() == DType::F64 || weight.dtype() == DType::F64 || grads[0].dtype() == DType::F64
            ? run<double>(grads[0], DType::F64)
            : run<float>(grads[0], DType::F32);
    if (next_edges.size() > 3)  // a fused residual: d out / d residual = 1
      out.push_back(grads[0].dtype() == residual_dtype ? grads[0] : grads[0].to(residual_dtype));
    return out;
  }

  // dX as a stride-1 convolution of dY needs a padding d (K - 1) - p >= 0 on both axes.
  bool dx_as_convolution() const {
    return p.stride == 1 && p.padding <= p.dilation * (g.kh - 1) &&
           p.padding <= p.dilation * (g.kw - 1);
  }

  template <typename T>
  std::vector<Tensor> run(const Tensor& grad_in, DType acc) {
    // f64 runs every operand in f64 (gradient checks); otherwise operands keep their dtypes.
    const bool f64 = acc == DType::F64;
    const Tensor grad = f64 ? grad_in.to(acc) : grad_in;
    const Tensor xw = f64 ? x.to(acc) : x;
    const Tensor ww = f64 ? weight.to(acc) : weight;
    const bool want_dx = next_edges[0].valid(), want_dw = next_edges[1].valid(),
               want_db = next_edges[2].valid();
    Tensor dx, dw, db;
    const Tensor dy = grad.contiguous(MemoryFormat::ChannelsLast);  // [M, O] rows
    const int64_t m = g.m(), k = g.k();
    if (want_dx) dx = input_gradient<T>(dy, ww, acc);
    if (want_dw || want_db) {
      const Tensor xs = xw.contiguous(MemoryFormat::ChannelsLast);  // NHWC
      const kernels::Conv2dOptions ko = kernel_options(p);  // for the patch walker
      const std::size_t x_elem = xs.element_size(), dy_elem = dy.element_size();
      const bool pointwise =
          g.kh == 1 && g.kw == 1 && p.stride == 1 && p.padding == 0 && g.oh == g.h && g.ow == g.w;
      const int64_t chunk = std::clamp<int64_t>(
          static_cast<int64_t>(kColsChunkBytes / (static_cast<std::size_t>(k) * x_elem)), 64, 8192);
      Tensor dw_acc = Tensor::empty({g.o, k}, acc);  // [O, KH*KW*Cg]
      // db: an f32 (f64) sum per chunk of pixels, the chunks added in f64.
      std::vector<T> db_chunk(static_cast<std::size_t>(g.o));
      std::vector<double> db_acc(static_cast<std::size_t>(g.o), 0.0);
      Tensor dyt = Tensor::empty({g.o, chunk}, dy.dtype());  // dY^T of one chunk
      Tensor cols = pointwise ? Tensor() : Tensor::empty({chunk, k}, xs.dtype());
      const char* dy_p = static_cast<const char*>(dy.data_ptr());
      const char* x_p = static_cast<const char*>(xs.data_ptr());
      for (int64_t p0 = 0; p0 < m; p0 += chunk) {
        const int64_t p1 = std::min(m, p0 + chunk), rows = p1 - p0;
        if (want_db) {
          std::fill(db_chunk.begin(), db_chunk.end(), T(0));
          add_column_sums<T>(dy_p + static_cast<std::size_t>(p0 * g.o) * dy_elem, dy.dtype(), rows,
                             g.o, db_chunk.data());
          for (int64_t o = 0; o < g.o; ++o)
            db_acc[static_cast<std::size_t>(o)] += db_chunk[static_cast<std::size_t>(o)];
        }
        if (!want_dw) continue;
        kernels::transpose_2d(dy_p + static_cast<std::size_t>(p0 * g.o) * dy_elem, rows, g.o, g.o,
                              dyt.data_ptr(), chunk, dy_elem);
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          const MatrixView a =
              MatrixView::row_major(static_cast<const char*>(dyt.data_ptr()) +
                                        static_cast<std::size_t>(grp * g.og * chunk) * dy_elem,
                                    dy.dtype(), g.og, rows, chunk);
          MatrixView b;
          if (pointwise) {
            b = MatrixView::row_major(
                x_p + static_cast<std::size_t>(p0 * g.c + grp * g.cg) * x_elem, xs.dtype(), rows, k,
                g.c);
          } else {
            char* cols_p = static_cast<char*>(cols.data_ptr());
            parallel_for(p0, p1, 64, [&](int64_t lo, int64_t hi) {
              kernels::gather_patch_rows(xs, ko, g, grp, lo, hi,
                                         cols_p + static_cast<std::size_t>((lo - p0) * k) * x_elem);
            });
            b = MatrixView::row_major(cols.data_ptr(), xs.dtype(), rows, k, k);
          }
          kernels::GemmEpilogue ep;
          ep.beta = p0 == 0 ? 0.0f : 1.0f;  // f32 partial sums over the chunks
          kernels::gemm(
              a, b,
              MutableMatrixView::row_major(dw_acc.data<T>() + grp * g.og * k, acc, g.og, k, k), ep);
        }
      }
      if (want_dw)
        dw = dw_acc.view({g.o, g.kh, g.kw, g.cg})
                 .permute({0, 3, 1, 2})
                 .contiguous()
                 .to(weight.dtype());
      if (want_db) db = Tensor::from_buffer(db_acc.data(), {g.o}, DType::F64).to(bias_dtype);
    }
    return {dx, dw, db};
  }

  template <typename T>
  Tensor input_gradient(const Tensor& dy, const Tensor& w, DType acc) {
    Tensor dx = Tensor::empty_like(x, MemoryFormat::Preserve);
    if (dx_as_convolution()) {
      kernels::Conv2dOptions o;
      o.pad_h = p.dilation * (g.kh - 1) - p.padding;
      o.pad_w = p.dilation * (g.kw - 1) - p.padding;
      o.dilation_h = o.dilation_w = p.dilation;
      o.groups = g.groups;
      const Tensor wf = flipped_weight(w, g);
      if (dx.dtype() == dy.dtype() || acc != DType::F64) {
        kernels::conv2d(dy, wf, nullptr, dx, o);
      } else {
        Tensor d64 = Tensor::empty_like(x, acc, MemoryFormat::Preserve);
        kernels::conv2d(dy, wf, nullptr, d64, o);
        dx.copy_(d64);
      }
      return dx;
    }
    const int64_t m = g.m(), k = g.k();
    const Tensor wr = w.permute({0, 2, 3, 1}).contiguous();  // [O, KH, KW, Cg]
    Tensor dx_acc = Tensor::zeros({g.n, g.h, g.w, g.c}, acc);
    const int64_t chunk = std::clamp<int64_t>(
        static_cast<int64_t>(kColsChunkBytes / (static_cast<std::size_t>(k) * sizeof(T))), 64,
        8192);
    Tensor cols = Tensor::empty({chunk, k}, acc);
    const std::size_t dy_elem = dy.element_size(), w_elem = wr.element_size();
    for (int64_t p0 = 0; p0 < m; p0 += chunk) {
      const int64_t p1 = std::min(m, p0 + chunk);
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const MatrixView dy_g =
            MatrixView::row_major(static_cast<const char*>(dy.data_ptr()) +
                                      static_cast<std::size_t>(p0 * g.o + grp * g.og) * dy_elem,
                                  dy.dtype(), p1 - p0, g.og, g.o);
        const MatrixView w_g =
            MatrixView::row_major(static_cast<const char*>(wr.data_ptr()) +
                                      static_cast<std::size_t>(grp * g.og * k) * w_elem,
                                  wr.dtype(), g.og, k, k);
        kernels::gemm(dy_g, w_g, MutableMatrixView::row_major(cols.data_ptr(), acc, p1 - p0, k, k));
        scatter_rows(dx_acc.data<T>(), g, p, grp, p0, p1, cols.data<T>());
      }
    }
    dx.copy_(dx_acc.permute({0, 3, 1, 2}));  // NHWC -> x's layout and dtype, rounded once
    return dx;
  }
  void release_saved() override { x = weight = Tensor(); }
};

}  // namespace

namespace {

// How conv2d takes a residual of the output's dtype: added in the epilogue (the output's shape),
// folded into the bias (one sample's per-channel offsets [1, O, 1, 1], as a time embedding), or
// else added after the convolution, as add() does (another dtype, or another broadcast), so the
// result's dtype never depends on the path.
enum class ResidualPath { Epilogue, Bias, After };  // Epilogue also when there is none

ResidualPath residual_path(const Tensor& residual, const Shape& out_shape, DType out_dtype) {
  if (!residual.defined()) return ResidualPath::Epilogue;
  ops_detail::check_float("conv2d", residual);
  if (residual.shape() == out_shape)
    return residual.dtype() == out_dtype ? ResidualPath::Epilogue : ResidualPath::After;
  if (out_shape[0] == 1 && residual.shape() == Shape{1, out_shape[1], 1, 1} &&
      residual.dtype() == out_dtype)
    return ResidualPath::Bias;
  return ResidualPath::After;
}

// bias + the residual's per-channel offsets (ResidualPath::Bias).
Tensor bias_plus(const Tensor& bias, const Tensor& residual) {
  const Tensor offsets = residual.reshape({residual.size(1)});
  return bias.defined() ? add(bias, offsets) : offsets;
}

// Both conv2d entries: the result when the residual is not for the epilogue (folded into the
// bias, or added after), else nothing.
template <typename Weight>
std::optional<Tensor> residual_elsewhere(const Tensor& x, const Weight& weight, const Tensor& bias,
                                         const Conv2dParams& p, const Tensor& residual,
                                         const Shape& out_shape) {
  switch (residual_path(residual, out_shape, x.dtype())) {
    case ResidualPath::After: return add(conv2d(x, weight, bias, p), residual);
    case ResidualPath::Bias: return conv2d(x, weight, bias_plus(bias, residual), p);
    case ResidualPath::Epilogue: break;
  }
  return std::nullopt;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dParams& p, const Tensor& residual) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::Conv2d, x_in, weight_in, bias_in);
  ops_detail::check_float("conv2d", x);
  ops_detail::check_float("conv2d", weight);
  MIXPREC_CHECK(x.dim() == 4 && weight.dim() == 4,
                "[conv2d] expected x [N, C, H, W] and weight [O, C/g, KH, KW], got ",
                shape_to_string(x.shape()), " and ", shape_to_string(weight.shape()));
  kernels::Conv2dOptions ko = kernel_options(p);
  Geometry g{
      x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3), 0,
      0,         p.groups,  0,         0};
  g.oh = kernels::conv_output_size(g.h, g.kh, p.stride, p.padding, p.dilation);
  g.ow = kernels::conv_output_size(g.w, g.kw, p.stride, p.padding, p.dilation);
  MIXPREC_CHECK(p.groups >= 1 && g.c % p.groups == 0 && g.o % p.groups == 0, "[conv2d] groups ",
                p.groups, " must divide channels ", g.c, " and ", g.o);
  g.cg = g.c / p.groups;
  g.og = g.o / p.groups;
  const Shape out_shape{g.n, g.o, g.oh, g.ow};
  if (auto routed = residual_elsewhere(x, weight, bias, p, residual, out_shape)) return *routed;
  Tensor out = Tensor::empty(out_shape, x.dtype(), output_format(x));
  {
    NoGrad no_grad;
    if (residual.defined()) ko.residual = &residual;
    kernels::conv2d(x, weight, bias.defined() ? &bias : nullptr, out, ko);
  }
  if (autograd::needs_grad({&x, &weight, &bias, &residual})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = x.detach();
    node->weight = weight.detach();
    node->p = p;
    node->g = g;
    if (bias.defined()) node->bias_dtype = bias.dtype();
    if (residual.defined()) {
      node->residual_dtype = residual.dtype();
      autograd::record(node, {&x, &weight, &bias, &residual}, {&out});
    } else {
      autograd::record(node, {&x, &weight, &bias}, {&out});
    }
  }
  return out;
}

Tensor conv2d(const Tensor& x_in, const kernels::PackedConvWeights& weight, const Tensor& bias_in,
              const Conv2dParams& p, const Tensor& residual) {
  const auto [x, bias] = amp::autocast_args(amp::AutocastOp::Conv2d, x_in, bias_in);
  MIXPREC_CHECK(!autograd::needs_grad({&x, &bias, &residual}),
                "[conv2d] packed weights are for inference: x, bias and residual must not need a "
                "gradient");
  ops_detail::check_float("conv2d", x);
  MIXPREC_CHECK(x.dim() == 4 && weight.defined(), "[conv2d] expected x [N, C, H, W] and packed ",
                "weights, got ", shape_to_string(x.shape()));
  const int64_t oh =
      kernels::conv_output_size(x.size(2), weight.shape()[2], p.stride, p.padding, p.dilation);
  const int64_t ow =
      kernels::conv_output_size(x.size(3), weight.shape()[3], p.stride, p.padding, p.dilation);
  const Shape out_shape{x.size(0), weight.shape()[0], oh, ow};
  if (auto routed = residual_elsewhere(x, weight, bias, p, residual, out_shape)) return *routed;
  Tensor out = Tensor::empty(out_shape, x.dtype(), output_format(x));
  kernels::Conv2dOptions ko = kernel_options(p);
  if (residual.defined()) ko.residual = &residual;
  kernels::conv2d(x, weight, bias.defined() ? &bias : nullptr, out, ko);
  return out;
}

}  // namespace mixprec
