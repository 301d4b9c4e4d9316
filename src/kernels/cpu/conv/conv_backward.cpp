// conv2d's backward (kernels/conv.h). It works in NHWC like the forward, with
// dY [M = N*OH*OW, O] (per group a column block), W_g [Og, K = KH*KW*Cg] and Cols [M, K] the
// forward's patches:
//   dX, stride 1: a convolution of dY with the flipped, transposed weight (the forward kernel,
//       which rounds straight into x's dtype); other strides: dCols = dY_g W_g per chunk of
//       pixels into an f32 buffer, added back into dX (col2im) in f32, rounded once at the end.
//   dW: per chunk of pixels, dW_g += dY_g^T Cols into an f32 [O, K] accumulator. dY_g^T is
//       made contiguous ([O, pixels], a cheap transpose) and Cols gathered in x's dtype, so
//       both GEMM operands pack from row-major memory (no strided element-by-element packing).
//   db: f32 sums of dY per channel over each chunk of pixels, the chunks added in f64.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../elementwise/elementwise_frontend.h"
#include "conv_internal.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/transpose.h"

namespace mixprec::kernels {
namespace {

using conv_detail::Geometry;

// Bytes of x's patches (Cols) gathered per chunk: a few MiB, well inside the L3.
constexpr std::size_t kColsChunkBytes = std::size_t{3} << 20;

// Adds f32/f64 patch rows of pixels [p0, p1) back into dX (NHWC, same type): col2im.
template <typename T>
void scatter_rows(T* dx, const Geometry& g, const Conv2dOptions& o, int64_t grp, int64_t p0,
                  int64_t p1, const T* rows) {
  const int64_t k = g.k();
  for (int64_t pix = p0; pix < p1; ++pix) {
    const int64_t n = pix / (g.oh * g.ow), oy = pix / g.ow % g.oh, ox = pix % g.ow;
    const T* row = rows + (pix - p0) * k;
    auto add_cell = [&](int64_t ky, int64_t kx, int64_t iy, int64_t ix) {
      T* dst = dx + ((n * g.h + iy) * g.w + ix) * g.c + grp * g.cg;
      const T* cell = row + (ky * g.kw + kx) * g.cg;
      for (int64_t c = 0; c < g.cg; ++c) dst[c] += cell[c];
    };
    conv_detail::for_each_inside_tap(g, o, oy, ox, add_cell);
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

// dX as a stride-1 convolution of dY needs a padding d (K - 1) - p >= 0 on both axes.
bool dx_as_convolution(const Geometry& g, const Conv2dOptions& o) {
  return o.stride_h == 1 && o.stride_w == 1 && o.pad_h <= o.dilation_h * (g.kh - 1) &&
         o.pad_w <= o.dilation_w * (g.kw - 1);
}

// dX (x's shape) from dY (NHWC rows) and the weight w, both already in f64 when acc is.
template <typename T>
void input_gradient(const Tensor& dx, const Tensor& dy, const Tensor& w, const Geometry& g,
                    const Conv2dOptions& opt, DType acc) {
  if (dx_as_convolution(g, opt)) {
    Conv2dOptions o;
    o.pad_h = opt.dilation_h * (g.kh - 1) - opt.pad_h;
    o.pad_w = opt.dilation_w * (g.kw - 1) - opt.pad_w;
    o.dilation_h = opt.dilation_h;
    o.dilation_w = opt.dilation_w;
    o.groups = g.groups;
    const Tensor wf = flipped_weight(w, g);
    if (dx.dtype() == dy.dtype() || acc != DType::F64) {
      conv2d(dy, wf, nullptr, dx, o);
    } else {
      Tensor d64 = Tensor::empty_like(dx, acc, MemoryFormat::Preserve);
      conv2d(dy, wf, nullptr, d64, o);
      dx.copy_(d64);
    }
    return;
  }
  const int64_t m = g.m(), k = g.k();
  const Tensor wr = w.permute({0, 2, 3, 1}).contiguous();  // [O, KH, KW, Cg]
  Tensor dx_acc = Tensor::zeros({g.n, g.h, g.w, g.c}, acc);
  const int64_t chunk = std::clamp<int64_t>(
      static_cast<int64_t>(kColsChunkBytes / (static_cast<std::size_t>(k) * sizeof(T))), 64, 8192);
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
      gemm(dy_g, w_g, MutableMatrixView::row_major(cols.data_ptr(), acc, p1 - p0, k, k));
      scatter_rows(dx_acc.data<T>(), g, opt, grp, p0, p1, cols.data<T>());
    }
  }
  dx.copy_(dx_acc.permute({0, 3, 1, 2}));  // NHWC -> dx's layout and dtype, rounded once
}

// dW and db (where `out` has them), chunk by chunk of output pixels.
template <typename T>
void weight_and_bias_gradients(const Tensor& x, const Tensor& dy, const Geometry& g,
                               const Conv2dOptions& opt, DType acc, const Conv2dGrads& out) {
  const bool want_weight = out.weight.defined(), want_bias = out.bias.defined();
  const Tensor xs = x.contiguous(MemoryFormat::ChannelsLast);  // NHWC
  const int64_t m = g.m(), k = g.k();
  const std::size_t x_elem = xs.element_size(), dy_elem = dy.element_size();
  const bool pointwise = g.kh == 1 && g.kw == 1 && opt.stride_h == 1 && opt.stride_w == 1 &&
                         opt.pad_h == 0 && opt.pad_w == 0 && g.oh == g.h && g.ow == g.w;
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
    if (want_bias) {
      std::fill(db_chunk.begin(), db_chunk.end(), T(0));
      add_column_sums<T>(dy_p + static_cast<std::size_t>(p0 * g.o) * dy_elem, dy.dtype(), rows, g.o,
                         db_chunk.data());
      for (int64_t o = 0; o < g.o; ++o)
        db_acc[static_cast<std::size_t>(o)] += db_chunk[static_cast<std::size_t>(o)];
    }
    if (!want_weight) continue;
    transpose_2d(dy_p + static_cast<std::size_t>(p0 * g.o) * dy_elem, rows, g.o, g.o,
                 dyt.data_ptr(), chunk, dy_elem);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const MatrixView a =
          MatrixView::row_major(static_cast<const char*>(dyt.data_ptr()) +
                                    static_cast<std::size_t>(grp * g.og * chunk) * dy_elem,
                                dy.dtype(), g.og, rows, chunk);
      MatrixView b;
      if (pointwise) {
        b = MatrixView::row_major(x_p + static_cast<std::size_t>(p0 * g.c + grp * g.cg) * x_elem,
                                  xs.dtype(), rows, k, g.c);
      } else {
        char* cols_p = static_cast<char*>(cols.data_ptr());
        parallel_for(p0, p1, 64, [&](int64_t lo, int64_t hi) {
          conv_detail::gather_patch_rows(xs, opt, g, grp, lo, hi,
                                         cols_p + static_cast<std::size_t>((lo - p0) * k) * x_elem);
        });
        b = MatrixView::row_major(cols.data_ptr(), xs.dtype(), rows, k, k);
      }
      GemmEpilogue ep;
      ep.beta = p0 == 0 ? 0.0f : 1.0f;  // f32 partial sums over the chunks
      gemm(a, b, MutableMatrixView::row_major(dw_acc.data<T>() + grp * g.og * k, acc, g.og, k, k),
           ep);
    }
  }
  if (want_weight) out.weight.copy_(dw_acc.view({g.o, g.kh, g.kw, g.cg}).permute({0, 3, 1, 2}));
  if (want_bias) out.bias.copy_(Tensor::from_buffer(db_acc.data(), {g.o}, DType::F64));
}

template <typename T>
void backward(const Tensor& x, const Tensor& weight, const Tensor& grad_in, const Geometry& g,
              const Conv2dOptions& opt, DType acc, const Conv2dGrads& into) {
  // f64 runs every operand in f64 (gradient checks); otherwise operands keep their dtypes.
  const bool f64 = acc == DType::F64;
  const Tensor grad = f64 ? grad_in.to(acc) : grad_in;
  const Tensor dy = grad.contiguous(MemoryFormat::ChannelsLast);  // [M, O] rows
  if (into.input.defined())
    input_gradient<T>(into.input, dy, f64 ? weight.to(acc) : weight, g, opt, acc);
  if (into.weight.defined() || into.bias.defined())
    weight_and_bias_gradients<T>(f64 ? x.to(acc) : x, dy, g, opt, acc, into);
}

}  // namespace

void conv2d_backward_into(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                          const Conv2dOptions& opt, const Conv2dGrads& into) {
  constexpr const char* kOp = "conv2d_backward";
  MIXPREC_CHECK(opt.input_scale == 1,
                "[conv2d_backward] a fused upsample (input_scale > 1) is for inference only");
  const Geometry g = conv_detail::geometry(x, weight.shape(), opt);
  const Shape out_shape{g.n, g.o, g.oh, g.ow};
  MIXPREC_CHECK(grad_out.shape() == out_shape, "[conv2d_backward] grad_out has shape ",
                shape_to_string(grad_out.shape()), ", expected ", shape_to_string(out_shape));
  if (into.input.defined()) {
    frontend::check_floating(into.input, kOp, "the input gradient");
    frontend::check_shape(into.input, x.shape(), kOp, "the input gradient", "x's shape");
  }
  if (into.weight.defined()) {
    frontend::check_floating(into.weight, kOp, "the weight gradient");
    frontend::check_shape(into.weight, weight.shape(), kOp, "the weight gradient",
                          "the weight's shape");
  }
  if (into.bias.defined()) {
    frontend::check_floating(into.bias, kOp, "the bias gradient");
    frontend::check_shape(into.bias, {g.o}, kOp, "the bias gradient", "[out channels]");
  }
  if (x.dtype() == DType::F64 || weight.dtype() == DType::F64 || grad_out.dtype() == DType::F64)
    backward<double>(x, weight, grad_out, g, opt, DType::F64, into);
  else
    backward<float>(x, weight, grad_out, g, opt, DType::F32, into);
}

Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                            const Conv2dOptions& opt, const Conv2dGradRequest& want) {
  Conv2dGrads grads;
  if (want.input) grads.input = Tensor::empty_like(x, MemoryFormat::Preserve);
  if (want.weight) grads.weight = Tensor::empty(weight.shape(), weight.dtype());
  if (want.bias) grads.bias = Tensor::empty({weight.size(0)}, want.bias_dtype);
  conv2d_backward_into(x, weight, grad_out, opt, grads);
  return grads;
}

}  // namespace mixprec::kernels
