#include "mixprec/kernels/conv.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>
#include <vector>

#include "conv_direct.h"
#include "conv_internal.h"
#include "conv_pointwise_small.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"
#include "../isa/candidates.h"
#include "../simd/simd_math.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels {
namespace {

using conv_detail::Geometry;
using conv_detail::GroupOutput;

constexpr int64_t kTileRows = 256;  // output pixels gathered per im2col tile

bool is_conv_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

}  // namespace

Geometry conv_detail::geometry(const Tensor& x, const Shape& w_shape, const Conv2dOptions& opt) {
  MIXPREC_CHECK(opt.groups >= 1 && opt.stride_h >= 1 && opt.stride_w >= 1 && opt.dilation_h >= 1 &&
                    opt.dilation_w >= 1 && opt.pad_h >= 0 && opt.pad_w >= 0,
                "[conv2d] groups, strides and dilations must be >= 1 and paddings >= 0");
  MIXPREC_CHECK(opt.input_scale >= 1 && std::has_single_bit(static_cast<uint64_t>(opt.input_scale)),
                "[conv2d] input_scale must be a power of two, got ", opt.input_scale);
  const int shift = std::countr_zero(static_cast<uint64_t>(opt.input_scale));
  Geometry g{.n = x.size(0),
             .c = x.size(1),
             .h = x.size(2) << shift,
             .w = x.size(3) << shift,
             .o = w_shape[0],
             .kh = w_shape[2],
             .kw = w_shape[3],
             .oh = 0,
             .ow = 0,
             .groups = opt.groups,
             .cg = 0,
             .og = 0,
             .scale_shift = shift};
  MIXPREC_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "[conv2d] ", g.groups,
                " groups must divide the ", g.c, " input and ", g.o, " output channels");
  g.cg = g.c / g.groups;
  g.og = g.o / g.groups;
  MIXPREC_CHECK(w_shape[1] == g.cg, "[conv2d] weight ", shape_to_string(w_shape), " expects ",
                w_shape[1] * g.groups, " input channels, x ", shape_to_string(x.shape()), " has ",
                g.c);
  g.oh = conv_output_size(g.h, g.kh, opt.stride_h, opt.pad_h, opt.dilation_h);
  g.ow = conv_output_size(g.w, g.kw, opt.stride_w, opt.pad_w, opt.dilation_w);
  return g;
}

namespace {

// The weight is given by shape and dtype: a packed weight keeps no tensor.
Geometry check(const Tensor& x, const Shape& w_shape, DType w_dtype, const Tensor* bias,
               const Tensor& out, const Conv2dOptions& opt) {
  MIXPREC_CHECK(x.dim() == 4 && w_shape.size() == 4 && out.dim() == 4,
                "[conv2d] expected 4-D x [N, C, H, W], ",
                "weight [O, C/groups, KH, KW] and out [N, O, OH, OW], got x ",
                shape_to_string(x.shape()), ", weight ", shape_to_string(w_shape), ", out ",
                shape_to_string(out.shape()));
  for (const DType t : {x.dtype(), w_dtype, out.dtype()})
    MIXPREC_CHECK(is_conv_float(t), "[conv2d] expected f32, bf16, f16 (or all-f64) tensors, got ",
                  dtype_name(t));
  const Geometry g = conv_detail::geometry(x, w_shape, opt);
  const Shape expected{g.n, g.o, g.oh, g.ow};
  MIXPREC_CHECK(out.shape() == expected, "[conv2d] out has shape ", shape_to_string(out.shape()),
                ", expected ", shape_to_string(expected));
  if (bias != nullptr)
    MIXPREC_CHECK(bias->shape() == Shape{g.o} && is_conv_float(bias->dtype()),
                  "[conv2d] bias has shape ", shape_to_string(bias->shape()), " and dtype ",
                  dtype_name(bias->dtype()), ", expected [", g.o, "] of a float dtype");
  if (opt.residual != nullptr)
    MIXPREC_CHECK(opt.residual->shape() == expected && is_conv_float(opt.residual->dtype()),
                  "[conv2d] residual has shape ", shape_to_string(opt.residual->shape()),
                  ", expected ", shape_to_string(expected));
  // The f32-lane paths read f32, bf16 and f16 only: an f64 bias or residual joins an f64 run.
  for (const Tensor* t : {bias, opt.residual})
    MIXPREC_CHECK(t == nullptr || t->dtype() != DType::F64 || x.dtype() == DType::F64,
                  "[conv2d] an f64 bias or residual needs f64 x, got x ", dtype_name(x.dtype()));
  return g;
}

// f64 (gradient checks): a direct loop over output elements in double, from the definition.
void conv2d_f64(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
                const Conv2dOptions& opt, const Geometry& g) {
  const Tensor x64 = x.to(DType::F64).contiguous(), w64 = weight.to(DType::F64).contiguous();
  const Tensor b64 = bias != nullptr ? bias->to(DType::F64).contiguous() : Tensor();
  const Tensor r64 = opt.residual != nullptr ? opt.residual->to(DType::F64).contiguous() : Tensor();
  const Tensor y64 = Tensor::empty(out.shape(), DType::F64);  // NCHW, then copied into out's layout
  const double* xp = x64.data<double>();
  const double* wp = w64.data<double>();
  double* yp = y64.data<double>();
  parallel_for(0, g.n * g.o, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t no = lo; no < hi; ++no) {
      const int64_t n = no / g.o, o = no % g.o, grp = o / g.og;
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double acc = b64.defined() ? b64.data<double>()[o] : 0.0;
          for (int64_t c = 0; c < g.cg; ++c)
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
                const int64_t ix = ox * opt.stride_w - opt.pad_w + kx * opt.dilation_w;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                acc += xp[((n * g.c + grp * g.cg + c) * g.h + iy) * g.w + ix] *
                       wp[((o * g.cg + c) * g.kh + ky) * g.kw + kx];
              }
          const int64_t at = ((n * g.o + o) * g.oh + oy) * g.ow + ox;
          yp[at] = reference_activation(opt.activation, acc) +
                   (r64.defined() ? r64.data<double>()[at] : 0.0);
        }
    }
  });
  out.copy_(y64);
}

Tensor channels_last(const Tensor& t) {
  return t.is_contiguous(MemoryFormat::ChannelsLast) ? t : t.contiguous(MemoryFormat::ChannelsLast);
}

}  // namespace

// The scalar reference of a depthwise row (conv_direct.h): f32 products and sums in tap order.
namespace conv_detail {
void depthwise_row_scalar(const DepthwiseRow& r, float* out) {
  const int64_t c = r.channels, in_step = r.shared_input ? 1 : c, lane = r.shared_input ? 0 : 1;
  for (int64_t ox = 0; ox < r.out_width; ++ox) {
    float* acc = out + ox * c;
    std::copy(r.bias, r.bias + c, acc);
    for (int64_t ky = 0; ky < r.kernel_h; ++ky) {
      if (r.rows[ky] == nullptr) continue;
      for (int64_t kx = 0; kx < r.kernel_w; ++kx) {
        const int64_t ix = ox * r.stride - r.pad + kx * r.dilation;
        if (ix < 0 || ix >= r.in_width) continue;
        const float* xin = r.rows[ky] + ix * in_step;
        const float* wk = r.weight + (ky * r.kernel_w + kx) * c;
        for (int64_t k = 0; k < c; ++k) acc[k] += xin[k * lane] * wk[k];
      }
    }
  }
}
}  // namespace conv_detail

namespace {

// Depthwise (one input channel per group, one output per group), or a one-channel input read
// by every output channel (depthwise with a channel multiplier): per output row, the level's
// row kernel into an f32 row, then the activation and residual, then one conversion of the row.
bool depthwise_takes(const Geometry& g) {
  return (g.groups == g.c && g.groups == g.o) || (g.c == 1 && g.groups == 1);
}
void depthwise(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
               const Conv2dOptions& opt, const Geometry& g) {
  static constexpr IsaTable<conv_detail::DepthwiseRowFn> kRow{
      {conv_detail::depthwise_row_scalar, nullptr, conv_detail::depthwise_row_avx512}};
  conv_detail::DepthwiseRowFn* row_kernel = kRow();
  // Weights as f32 [KH][KW][C]; bias as f32 [C].
  const Tensor wf = weight.to(DType::F32).permute({2, 3, 0, 1}).contiguous();
  const Tensor bf = bias != nullptr ? bias->to(DType::F32).contiguous() : Tensor::zeros({g.o});
  // The row kernels read f32 rows. A 16-bit input is widened a row at a time into a per-thread
  // ring, not copied whole: each input row serves up to KH output rows, and a thread walks its
  // output rows in order. Row key n * H + iy sits in slot key % (KH * dilation), so the KH rows
  // of one output row (keys dilation apart) never share a slot.
  const bool widen = x.dtype() != DType::F32;
  const auto row_elems = static_cast<std::size_t>(g.w * g.c);
  const int64_t ring_slots = g.kh * opt.dilation_h;
  const Tensor* residual = opt.residual;  // channels-last (conv2d_impl): a row is [OW][O]
  MIXPREC_ASSERT(residual == nullptr || residual->is_contiguous(MemoryFormat::ChannelsLast));
  // One output row is contiguous in a channels-last output: converted in one call.
  const bool row_contiguous = out.stride(1) == 1 && out.stride(3) == g.o;
  parallel_for(0, g.n * g.oh, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<std::size_t>(g.ow * g.o));  // [OW][O]
    std::vector<float> skip(residual != nullptr ? acc.size() : 0);  // the residual's row in f32
    std::vector<const float*> rows(static_cast<std::size_t>(g.kh));
    std::vector<float> ring(widen ? static_cast<std::size_t>(ring_slots) * row_elems : 0);
    std::vector<int64_t> ring_key(static_cast<std::size_t>(ring_slots), -1);
    auto input_row = [&](int64_t key) -> const float* {
      const char* src = static_cast<const char*>(x.data_ptr()) +
                        static_cast<std::size_t>(key) * row_elems * x.element_size();
      if (!widen) return reinterpret_cast<const float*>(src);
      const auto slot = static_cast<std::size_t>(key % ring_slots);
      float* dst = ring.data() + slot * row_elems;
      if (ring_key[slot] != key) {
        convert(src, x.dtype(), dst, DType::F32, row_elems);
        ring_key[slot] = key;
      }
      return dst;
    };
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
        rows[static_cast<std::size_t>(ky)] = iy < 0 || iy >= g.h ? nullptr : input_row(n * g.h + iy);
      }
      row_kernel({.rows = rows.data(), .weight = wf.data<float>(), .bias = bf.data<float>(), .channels = g.o,
                  .in_width = g.w, .out_width = g.ow, .kernel_h = g.kh, .kernel_w = g.kw, .stride = opt.stride_w,
                  .pad = opt.pad_w, .dilation = opt.dilation_w, .shared_input = g.c != g.o},
                 acc.data());
      if (residual != nullptr)
        convert(static_cast<const char*>(residual->data_ptr()) +
                    static_cast<std::size_t>(n * residual->stride(0) + oy * residual->stride(2)) *
                        residual->element_size(),
                residual->dtype(), skip.data(), DType::F32, skip.size());
      if (opt.activation == Activation::None && residual != nullptr) {  // a plain skip: one add
        for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += skip[i];
      } else if (opt.activation != Activation::None || residual != nullptr) {
        for (int64_t ox = 0; ox < g.ow; ++ox)
          for (int64_t c = 0; c < g.o; ++c) {
            float& v = acc[static_cast<std::size_t>(ox * g.o + c)];
            switch (opt.activation) {
              case Activation::None:
                break;
              case Activation::ReLU:
                v = simd::Scalar::max(0.0f, v);
                break;
              case Activation::GeluTanh:
                v = simd::gelu_tanh<simd::Scalar>(v);
                break;
              case Activation::GeluErf:
                v = simd::gelu_erf<simd::Scalar>(v);
                break;
              case Activation::SiLU:
                v = simd::silu<simd::Scalar>(v);
                break;
            }
            if (residual != nullptr) v += skip[static_cast<std::size_t>(ox * g.o + c)];
          }
      }
      char* dst = static_cast<char*>(out.data_ptr()) +
                  static_cast<std::size_t>(n * out.stride(0) + oy * out.stride(2)) * out.element_size();
      if (row_contiguous) {
        convert(acc.data(), DType::F32, dst, out.dtype(), static_cast<std::size_t>(g.ow * g.o));
        continue;
      }
      for (int64_t ox = 0; ox < g.ow; ++ox)
        convert_strided(acc.data() + ox * g.o, DType::F32, 1,
                        dst + static_cast<std::size_t>(ox * out.stride(3)) * out.element_size(), out.dtype(),
                        out.stride(1), static_cast<std::size_t>(g.o));
    }
  });
}

}  // namespace

// The scalar reference of the few-channel 1x1 convolution (conv_pointwise_small.h).
namespace conv_detail {
void pointwise_block_scalar(const PointwiseBlock& a) { pointwise_block<simd::Scalar>(a); }
}  // namespace conv_detail

namespace {

// 1x1, stride 1, no padding, one group, at most 32 channels in and out, no epilogue: PeakNet's
// laterals and head, on blocks of pixel vectors (conv_pointwise_small.h) rather than the GEMM.
bool pointwise_small_takes(const Geometry& g, const Conv2dOptions& opt) {
  return g.kh == 1 && g.kw == 1 && opt.stride_h == 1 && opt.stride_w == 1 && opt.pad_h == 0 &&
         opt.pad_w == 0 && g.groups == 1 && g.c <= 32 && g.o <= 32 &&
         opt.activation == Activation::None && opt.residual == nullptr;
}
void pointwise_small(const Tensor& xs, const Tensor& weight, const Tensor* bias, const Tensor& ys,
                     const Geometry& g) {
  using conv_detail::kPointwiseBlock;
  static constexpr IsaTable<conv_detail::PointwiseBlockFn> kBlocks{
      {conv_detail::pointwise_block_scalar, conv_detail::pointwise_block_avx2,
       conv_detail::pointwise_block_avx512}};
  conv_detail::PointwiseBlockFn* block = kBlocks();
  MIXPREC_ASSERT(xs.is_contiguous(MemoryFormat::ChannelsLast) &&
                 ys.is_contiguous(MemoryFormat::ChannelsLast));
  // Host copies in f32 (no tensor allocated per call): weights [O][C] and the bias.
  auto host_f32 = [](const Tensor& t) {
    const Tensor c = t.is_contiguous() ? t : t.contiguous();
    std::vector<float> values(static_cast<std::size_t>(c.numel()));
    convert(c.data_ptr(), c.dtype(), values.data(), DType::F32, values.size());
    return values;
  };
  const std::vector<float> wf = host_f32(weight);
  const std::vector<float> bf =
      bias != nullptr ? host_f32(*bias) : std::vector<float>(static_cast<std::size_t>(g.o), 0.0f);
  const int64_t pixels = g.n * g.h * g.w;
  const int64_t blocks = (pixels + kPointwiseBlock - 1) / kPointwiseBlock;
  parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(
        static_cast<std::size_t>((g.c + g.o + std::max(g.c, g.o)) * kPointwiseBlock));
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t p0 = b * kPointwiseBlock;
      block({static_cast<const char*>(xs.data_ptr()) + static_cast<std::size_t>(p0 * g.c) * xs.element_size(),
             xs.dtype(),
             static_cast<char*>(ys.data_ptr()) + static_cast<std::size_t>(p0 * g.o) * ys.element_size(),
             ys.dtype(), std::min(kPointwiseBlock, pixels - p0), g.c, g.o, wf.data(), bf.data(),
             scratch.data()});
    }
  });
}

}  // namespace

// ---- The direct kernels' driver: row pointers per tile and tap, tiles per output row, threads
// over rows. The tiles themselves are in conv_direct_avx512*.cpp and conv_direct_amx.cpp. ----
namespace conv_detail {
namespace {

// Per-thread scratch of the direct convolution, reused across calls.
struct DirectScratch {
  std::vector<const void*> a_rows;  // [taps][kDirectMaxMr]
  std::vector<int> tap_index;       // [taps]
  Allocation zeros;                 // one zeroed pixel: the rows outside the image
};
DirectScratch& thread_direct_scratch() {
  thread_local DirectScratch scratch;
  return scratch;
}

}  // namespace

gemm_detail::TileEpilogue tile_epilogue(const GroupOutput& out, int64_t pixel, int64_t col) {
  const int64_t c = out.col0 + col;
  gemm_detail::TileEpilogue ep{
      1.0f,
      0.0f,
      nullptr,
      DType::F32,
      out.activation,
      nullptr,
      DType::F32,
      out.o,
      static_cast<char*>(out.ys.data_ptr()) +
          static_cast<std::size_t>(pixel * out.ldc + c) * out.ys.element_size(),
      out.ys.dtype(),
      out.ldc};
  if (out.bias != nullptr) {
    ep.bias = static_cast<const char*>(out.bias->data_ptr()) +
              static_cast<std::size_t>(c) * out.bias->element_size();
    ep.bias_dtype = out.bias->dtype();
  }
  if (out.residual != nullptr) {
    ep.residual = static_cast<const char*>(out.residual->data_ptr()) +
                  static_cast<std::size_t>(pixel * out.o + c) * out.residual->element_size();
    ep.residual_dtype = out.residual->dtype();
  }
  return ep;
}

// Direct convolution of group `grp`: threads take whole output rows; each row is cut into
// near-equal tiles of at most kDirectMaxMr pixels, and each tile runs once per column panel
// with the same row pointers (or, for large weights, panel by panel over all the rows).
void run_direct(const DirectKernel& dk, const Tensor& xs, const PackedMatrix& b,
                const Conv2dOptions& opt, const Geometry& g, int64_t grp, const GroupOutput& out) {
  const std::size_t es = xs.element_size();
  MIXPREC_ASSERT(dtype_size(dk.compute) == es);
  const std::size_t tap_bytes = static_cast<std::size_t>(g.cg * dk.nr) * es;
  const std::size_t panel_bytes = tap_bytes * static_cast<std::size_t>(g.kh * g.kw);
  const int64_t tiles = (g.ow + kDirectMaxMr - 1) / kDirectMaxMr;
  const int64_t panels = (g.og + dk.nr - 1) / dk.nr;
  const char* xp = static_cast<const char*>(xs.data_ptr());
  const int64_t sx_n = xs.stride(0), sx_h = xs.stride(2), sx_w = xs.stride(3);
  // Weights beyond about half of L2 are streamed once per panel over all of a thread's rows
  // instead of once per tile.
  const bool panel_outer = static_cast<std::size_t>(panels) * panel_bytes > (std::size_t{1} << 20);
  parallel_for(0, g.n * g.oh, 1, [&](int64_t lo, int64_t hi) {
    DirectScratch& s = thread_direct_scratch();
    const std::size_t max_rows = static_cast<std::size_t>(g.kh * g.kw * kDirectMaxMr);
    if (s.a_rows.size() < max_rows) s.a_rows.resize(max_rows);
    if (s.tap_index.size() < static_cast<std::size_t>(g.kh * g.kw))
      s.tap_index.resize(static_cast<std::size_t>(g.kh * g.kw));
    if (s.zeros.size() < static_cast<std::size_t>(g.cg) * es) {
      s.zeros = Allocation(static_cast<std::size_t>(g.cg) * es);
      std::memset(s.zeros.data(), 0, s.zeros.size());
    }
    // Row pointers of the tile at (row, ox0, width); returns the taps that touch the image.
    auto locate = [&](int64_t row, int64_t ox0, int width) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      int taps = 0;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
        if (iy < 0 || iy >= g.h) continue;
        const int64_t row_base = n * sx_n + (iy >> g.scale_shift) * sx_h + grp * g.cg;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          // Pixel i reads input column x0 + i * stride_w: pixels [first, last) lie inside the
          // image, evenly spaced in memory unless upsampled. (Pixel by pixel, with a bounds test
          // each, this was an eighth of a 32-channel convolution's time.)
          const int64_t sw = opt.stride_w, x0 = ox0 * sw - opt.pad_w + kx * opt.dilation_w;
          const int64_t first = std::min<int64_t>(width, x0 >= 0 ? 0 : (sw - 1 - x0) / sw);
          const int64_t last =
              std::clamp<int64_t>(x0 >= g.w ? 0 : (g.w - 1 - x0) / sw + 1, first, width);
          if (first == last) continue;  // the tap misses the image
          const void** rows = s.a_rows.data() + taps * kDirectMaxMr;
          for (int64_t i = 0; i < first; ++i) rows[i] = s.zeros.data();
          for (int64_t i = last; i < width; ++i) rows[i] = s.zeros.data();
          if (g.scale_shift == 0) {
            const char* p = xp + static_cast<std::size_t>(row_base + (x0 + first * sw) * sx_w) * es;
            const std::size_t step = static_cast<std::size_t>(sw * sx_w) * es;
            for (int64_t i = first; i < last; ++i, p += step) rows[i] = p;
          } else {
            for (int64_t i = first; i < last; ++i)
              rows[i] = xp + static_cast<std::size_t>(
                                 row_base + ((x0 + i * sw) >> g.scale_shift) * sx_w) * es;
          }
          s.tap_index[static_cast<std::size_t>(taps++)] = static_cast<int>(ky * g.kw + kx);
        }
      }
      return taps;
    };
    auto run_tile = [&](int64_t row, int64_t ox0, int width, int taps, int64_t j) {
      const DirectArgs args{
          taps,
          s.a_rows.data(),
          s.tap_index.data(),
          static_cast<const char*>(b.panels()) + static_cast<std::size_t>(j) * panel_bytes,
          tap_bytes,
          g.cg};
      const int cols = static_cast<int>(std::min<int64_t>(dk.nr, g.og - j * dk.nr));
      dk.tiles[width - 1](args, cols, tile_epilogue(out, row * g.ow + ox0, j * dk.nr));
    };
    if (!panel_outer) {  // each tile's row pointers serve every panel
      for (int64_t row = lo; row < hi; ++row)
        for (int64_t t = 0, ox0 = 0; t < tiles; ++t) {
          const int width = static_cast<int>(g.ow / tiles + (t < g.ow % tiles ? 1 : 0));
          const int taps = locate(row, ox0, width);
          for (int64_t j = 0; j < panels; ++j) run_tile(row, ox0, width, taps, j);
          ox0 += width;
        }
      return;
    }
    for (int64_t j = 0; j < panels; ++j)  // one panel at a time stays in L2
      for (int64_t row = lo; row < hi; ++row)
        for (int64_t t = 0, ox0 = 0; t < tiles; ++t) {
          const int width = static_cast<int>(g.ow / tiles + (t < g.ow % tiles ? 1 : 0));
          run_tile(row, ox0, width, locate(row, ox0, width), j);
          ox0 += width;
        }
  });
}

}  // namespace conv_detail

namespace {

// Per-thread im2col tile, reused across calls.
Allocation& thread_patches() {
  thread_local Allocation patches;
  return patches;
}

// ---- The dtype the weights are packed for (and the kernels read) ----
// bf16 with bf16 weights stays bf16 for AMX and where vdpbf16ps pays; the AVX-512 levels widen
// other 16-bit inputs to f32 for the direct kernel (the bf16 kernels need bf16 weights). Below
// AVX-512 the input dtype is kept (the GEMM converts while packing).
struct PackRequest {
  DType x, w;
  int64_t cg;  // channels per group
  Bf16ConvCompute mode;
  IsaLevel level;
};

// Whether a bf16 convolution keeps bf16 pairs (AMX tiles or vdpbf16ps) rather than widening.
// Auto's rule for shapes AMX does not take is a property of the core, decided from cpuid,
// never by timing (a timing probe on a busy machine flipped the choice from run to run, and
// with it the rounding and the memory peak): where vdpbf16ps issues at half rate
// (vdpbf16ps_at_half_rate, Intel's AMX cores), widening to f32 is as fast; the GEMM follows
// the same rule.
bool bf16_pairs_take(const PackRequest& r) {
  if (r.x != DType::BF16 || r.w != DType::BF16 || r.cg % 2 != 0) return false;
  switch (r.mode) {
    case Bf16ConvCompute::DotProduct:
      return true;
    case Bf16ConvCompute::WidenToF32:
      return false;
    case Bf16ConvCompute::Auto:
      break;
  }
  const bool amx_takes = r.level >= IsaLevel::Amx && r.cg % 32 == 0;
  return amx_takes || !vdpbf16ps_at_half_rate();
}

using PackCandidate = Candidate<PackRequest, DType (*)(const PackRequest&)>;
constexpr std::array<PackCandidate, 3> kPackDtypes{{
    {"bf16 pairs (amx tiles, vdpbf16ps)", IsaLevel::Avx512Bf16, bf16_pairs_take,
     [](const PackRequest&) { return DType::BF16; }},
    {"f32 (the avx512 direct kernel)", IsaLevel::Avx512, nullptr,
     [](const PackRequest&) { return DType::F32; }},
    {"the input's (converted while packing)", IsaLevel::Scalar, nullptr,
     [](const PackRequest& r) { return r.x; }},
}};
static_assert(ends_with_reference(kPackDtypes));

DType pack_dtype_for(DType x_dtype, DType w_dtype, int64_t cg) {
  const DispatchConfig config = dispatch_config();
  const PackRequest r{x_dtype, w_dtype, cg, config.bf16_conv, config.level};
  return pick(kPackDtypes, r, r.level).kernel(r);
}

// ---- How one group of a packed convolution runs ----
struct GroupProblem {
  const Tensor& xs;  // NHWC input
  const PackedMatrix& b;
  const Conv2dOptions& opt;
  const Geometry& g;
  int64_t grp;
  const GroupOutput& go;
  Bf16ConvCompute mode;
  Tensor& widened;  // xs in the packed A dtype, made on first use and kept for the next groups
};

// The GEMM epilogue and output view of output rows (pixels) [row0, row0 + rows) of the group.
GemmEpilogue gemm_epilogue_at(const GroupProblem& q, int64_t row0) {
  const GroupOutput& go = q.go;
  GemmEpilogue ep;
  ep.activation = go.activation;
  if (go.bias != nullptr) {
    ep.bias = static_cast<const char*>(go.bias->data_ptr()) +
              static_cast<std::size_t>(go.col0) * go.bias->element_size();
    ep.bias_dtype = go.bias->dtype();
  }
  if (go.residual != nullptr) {
    ep.residual = static_cast<const char*>(go.residual->data_ptr()) +
                  static_cast<std::size_t>(row0 * go.o + go.col0) * go.residual->element_size();
    ep.residual_dtype = go.residual->dtype();
    ep.residual_ld = go.o;
  }
  return ep;
}
MutableMatrixView out_rows(const GroupProblem& q, int64_t row0, int64_t rows) {
  const Tensor& ys = q.go.ys;
  return MutableMatrixView::row_major(
      static_cast<char*>(ys.data_ptr()) +
          static_cast<std::size_t>(row0 * q.go.ldc + q.go.col0) * ys.element_size(),
      ys.dtype(), rows, q.g.og, q.go.ldc);
}

// 1x1, stride 1, no padding, one group: the NHWC input is already the [N*H*W, C] patch matrix.
bool pointwise_takes(const GroupProblem& q) {
  const Geometry& g = q.g;
  const Conv2dOptions& opt = q.opt;
  return g.kh == 1 && g.kw == 1 && opt.stride_h == 1 && opt.stride_w == 1 && opt.pad_h == 0 &&
         opt.pad_w == 0 && g.groups == 1 && g.scale_shift == 0;
}
void run_pointwise(const GroupProblem& q) {
  const int64_t m = q.g.n * q.g.oh * q.g.ow;
  gemm_prepacked(MatrixView::row_major(q.xs.data_ptr(), q.xs.dtype(), m, q.g.cg, q.g.c), q.b,
                 out_rows(q, 0, m), gemm_epilogue_at(q, 0));
}

// AMX tiles: bf16 panels and input, channels per group a multiple of 32, and a mode that lets
// AMX run (Auto).
bool amx_takes(const GroupProblem& q) {
  return q.b.compute_dtype() == DType::BF16 && q.xs.dtype() == DType::BF16 && q.g.cg % 32 == 0 &&
         q.mode == Bf16ConvCompute::Auto;
}
void run_amx(const GroupProblem& q) {
  const Geometry& g = q.g;
  const Conv2dOptions& opt = q.opt;
  conv_detail::amx_conv({static_cast<const uint16_t*>(q.xs.data_ptr()) + q.grp * g.cg,
                         q.xs.stride(0), q.xs.stride(2), q.xs.stride(3), g.n, g.h, g.w, g.cg,
                         g.scale_shift, g.kh, g.kw, g.oh, g.ow, opt.stride_h, opt.stride_w,
                         opt.pad_h, opt.pad_w, opt.dilation_h, opt.dilation_w, q.b.panels(), g.og,
                         conv_detail::tile_epilogue(q.go, 0, 0)});
}

// The direct kernels read A in the dtype the weights were packed for.
bool direct_bf16_takes(const GroupProblem& q) {
  return q.b.compute_dtype() == DType::BF16 && q.b.a_dtype() == DType::BF16 && q.g.cg % 2 == 0;
}
bool direct_f32_takes(const GroupProblem& q) {
  return q.b.compute_dtype() == DType::F32 && q.b.a_dtype() == DType::F32;
}
// x converted to `dtype` in the calling thread's widening space (kept across calls, so a warm
// convolution allocates nothing); x is dense (channels_last).
Tensor widened_copy(const Tensor& x, DType dtype) {
  thread_local Allocation space;
  const std::size_t bytes = static_cast<std::size_t>(x.numel()) * dtype_size(dtype);
  Tensor out = Tensor::from_blob(space.reserve(bytes), x.shape(), x.strides(), dtype, nullptr);
  out.copy_(x);
  return out;
}

void run_direct(const GroupProblem& q, const conv_detail::DirectKernel& dk) {
  if (!q.widened.defined())  // f32 for the f32 direct kernel: one pass, once per call
    q.widened = q.xs.dtype() == q.b.a_dtype() ? q.xs : widened_copy(q.xs, q.b.a_dtype());
  conv_detail::run_direct(dk, q.widened, q.b, q.opt, q.g, q.grp, q.go);
}
void run_direct_bf16(const GroupProblem& q) {
  run_direct(q, *conv_detail::direct_kernel_avx512bf16());
}
void run_direct_f32(const GroupProblem& q) { run_direct(q, *conv_detail::direct_kernel_avx512()); }

// The reference: patches of kTileRows output pixels gathered per thread (im2col), times the
// packed weights.
void run_im2col(const GroupProblem& q) {
  const Geometry& g = q.g;
  const int64_t m = g.n * g.oh * g.ow, k = g.kh * g.kw * g.cg;
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  parallel_for(0, tiles, 1, [&](int64_t lo, int64_t hi) {
    Allocation& patches = thread_patches();
    patches.reserve(static_cast<std::size_t>(kTileRows * k) * q.xs.element_size());
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r0 = t * kTileRows, rows = std::min(kTileRows, m - r0);
      conv_detail::gather_patch_rows(q.xs, q.opt, g, q.grp, r0, r0 + rows, patches.data());
      gemm_prepacked(MatrixView::row_major(patches.data(), q.xs.dtype(), rows, k, k), q.b,
                     out_rows(q, r0, rows), gemm_epilogue_at(q, r0));
    }
  });
}

// Best first. They round alike (f32 sums, one rounding) except that AMX and vdpbf16ps flush
// bf16 subnormals; which of those runs for a bf16 convolution is decided by the packing
// (kPackDtypes, from Bf16ConvCompute), docs/NUMERICS.md.
using GroupCandidate = Candidate<GroupProblem, void (*)(const GroupProblem&)>;
constexpr std::array<GroupCandidate, 5> kGroupAlgorithms{{
    {"pointwise gemm", IsaLevel::Scalar, pointwise_takes, run_pointwise},
    {"direct amx tiles", IsaLevel::Amx, amx_takes, run_amx},
    {"direct vdpbf16ps", IsaLevel::Avx512Bf16, direct_bf16_takes, run_direct_bf16},
    {"direct avx512 fma", IsaLevel::Avx512, direct_f32_takes, run_direct_f32},
    {"im2col + gemm", IsaLevel::Scalar, nullptr, run_im2col},
}};
static_assert(ends_with_reference(kGroupAlgorithms));

// Everything but depthwise and f64: per group, the first of kGroupAlgorithms that takes it.
// ys's pixels are ldc elements apart.
void conv2d_packed(const Tensor& xs, const std::vector<PackedMatrix>& packed, const Tensor* bias,
                   const Tensor& ys, int64_t ldc, const Tensor* residual,
                   const Conv2dOptions& opt, const Geometry& g) {
  const Tensor bias_c = bias != nullptr ? bias->contiguous() : Tensor();
  const Bf16ConvCompute mode = dispatch_config().bf16_conv;
  Tensor widened;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const PackedMatrix& b = packed[static_cast<std::size_t>(grp)];
    const GroupOutput go{.ys = ys,
                         .bias = bias_c.defined() ? &bias_c : nullptr,
                         .residual = residual,
                         .activation = opt.activation,
                         .o = g.o,
                         .col0 = grp * g.og,
                         .ldc = ldc};
    const GroupProblem q{xs, b, opt, g, grp, go, mode, widened};
    pick(kGroupAlgorithms, q, b.level()).kernel(q);
  }
}

// Whether a convolution (not f64) runs one of the packed paths (kGroupAlgorithms).
bool packed_path_takes(const Geometry& g, const Conv2dOptions& opt) {
  return !depthwise_takes(g) && !pointwise_small_takes(g, opt);
}

// Shared by both conv2d entries: f64, depthwise, the few-channel 1x1, or the packed paths on
// NHWC operands. weight is read only by the first three (a packed weight keeps it for those);
// w_dtype is its dtype.
void conv2d_impl(const Tensor& x, const Tensor& weight, DType w_dtype,
                 const std::vector<PackedMatrix>* prepacked, const Tensor* bias, const Tensor& out,
                 const Conv2dOptions& opt, const Geometry& g) {
  if (out.numel() == 0) return;
  const bool f64 = x.dtype() == DType::F64 || w_dtype == DType::F64 || out.dtype() == DType::F64;
  const bool packed_path = !f64 && packed_path_takes(g, opt);
  MIXPREC_CHECK(packed_path || g.scale_shift == 0,
                "[conv2d] input_scale > 1 is read by the packed paths only, not by depthwise, "
                "the few-channel 1x1 or f64");
  if (f64) {
    MIXPREC_CHECK(x.dtype() == DType::F64 && w_dtype == DType::F64 && out.dtype() == DType::F64,
                  "[conv2d] f64 runs only when x, weight and out are all f64");
    return conv2d_f64(x, weight, bias, out, opt, g);
  }
  const Tensor xs = channels_last(x);
  // The output's pixel stride: a channels_last tensor's is its channel count, whatever the
  // strides of its size-1 dims say ([N, C, 1, 1] made contiguous has stride(3) 1); a channel
  // slice's is the channel count of the tensor it is cut from.
  const bool whole = out.is_contiguous(MemoryFormat::ChannelsLast);
  const int64_t slice_stride =
      packed_path && !whole ? channel_slice_pixel_stride(out.shape(), out.strides()) : 0;
  const bool out_direct = whole || slice_stride > 0;
  const int64_t ldc = slice_stride > 0 ? slice_stride : g.o;
  const Tensor ys =
      out_direct ? out : Tensor::empty(out.shape(), out.dtype(), MemoryFormat::ChannelsLast);
  Tensor residual;
  if (opt.residual != nullptr) residual = channels_last(*opt.residual);

  if (depthwise_takes(g)) {
    Conv2dOptions o = opt;
    o.residual = residual.defined() ? &residual : nullptr;
    depthwise(xs, weight, bias, ys, o, g);
  } else if (pointwise_small_takes(g, opt)) {
    pointwise_small(xs, weight, bias, ys, g);
  } else if (prepacked != nullptr) {
    conv2d_packed(xs, *prepacked, bias, ys, ldc, residual.defined() ? &residual : nullptr, opt, g);
  } else {
    conv2d_packed(xs,
                  conv_detail::pack_groups(weight, pack_dtype_for(xs.dtype(), w_dtype, g.cg), g),
                  bias, ys, ldc, residual.defined() ? &residual : nullptr, opt, g);
  }
  if (!out_direct) out.copy_(ys);
}

}  // namespace

int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad,
                         int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t out = (input + 2 * pad - span) / stride + 1;
  MIXPREC_CHECK(input + 2 * pad >= span && out >= 1, "[conv2d] a kernel of ", kernel, " (dilation ",
                dilation, ") does not fit an input of ", input, " with padding ", pad);
  return out;
}

void conv2d(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
            const Conv2dOptions& opt) {
  const Geometry g = check(x, weight.shape(), weight.dtype(), bias, out, opt);
  conv2d_impl(x, weight, weight.dtype(), nullptr, bias, out, opt, g);
}

std::size_t PackedConvWeights::bytes() const {
  std::size_t total =
      weight_.defined() ? static_cast<std::size_t>(weight_.numel()) * weight_.element_size() : 0;
  for (const PackedMatrix& m : packed_) total += m.bytes();
  return total;
}

PackedConvWeights pack_conv_weights(const Tensor& weight, DType x_dtype, int64_t groups) {
  MIXPREC_CHECK(weight.dim() == 4 && is_conv_float(weight.dtype()) && is_conv_float(x_dtype),
                "[pack_conv_weights] expected weight [O, C/groups, KH, KW] of a float dtype and a "
                "float input dtype, got ",
                shape_to_string(weight.shape()), " ", dtype_name(weight.dtype()), " for ",
                dtype_name(x_dtype));
  MIXPREC_CHECK(groups >= 1 && weight.size(0) % groups == 0, "[pack_conv_weights] ", groups,
                " groups must divide the ", weight.size(0), " output channels");
  PackedConvWeights p;
  p.shape_ = weight.shape();
  p.weight_dtype_ = weight.dtype();
  p.groups_ = groups;
  p.x_dtype_ = x_dtype;
  p.level_ = active_isa();
  p.pack_dtype_ = pack_dtype_for(x_dtype, weight.dtype(), weight.size(1));
  // Depthwise, or one input channel (groups 1, weight [O, 1, KH, KW]): the row kernels read
  // the weight itself. (The input's channel count is not known here; a weight of one input
  // channel per group fits only those two.)
  const bool depthwise = weight.size(1) == 1 && (groups == weight.size(0) || groups == 1);
  // A few-channel 1x1 keeps both: the weight for pointwise_small, the packing for when the call
  // asks for an epilogue that path does not take.
  const bool small_pointwise = weight.size(2) == 1 && weight.size(3) == 1 && groups == 1 &&
                               weight.size(0) <= 32 && weight.size(1) <= 32;
  if (weight.dtype() == DType::F64 || x_dtype == DType::F64 || depthwise || small_pointwise)
    p.weight_ = weight.clone(MemoryFormat::Contiguous);
  if (!(weight.dtype() == DType::F64 || x_dtype == DType::F64 || depthwise)) {
    Geometry g{};
    g.o = weight.size(0);
    g.kh = weight.size(2);
    g.kw = weight.size(3);
    g.groups = groups;
    g.cg = weight.size(1);
    g.og = g.o / groups;
    p.packed_ = conv_detail::pack_groups(weight, p.pack_dtype_, g);
  }
  return p;
}

bool conv2d_runs_packed(const PackedConvWeights& weight, const Conv2dOptions& opt) {
  if (!weight.defined() || weight.x_dtype() == DType::F64 || weight.weight_dtype() == DType::F64)
    return false;
  const Shape& w = weight.shape();
  Geometry g{};
  g.groups = weight.groups();
  g.c = w[1] * g.groups;
  g.o = w[0];
  g.kh = w[2];
  g.kw = w[3];
  return packed_path_takes(g, opt);
}

void conv2d(const Tensor& x, const PackedConvWeights& weight, const Tensor* bias, const Tensor& out,
            const Conv2dOptions& opt) {
  MIXPREC_CHECK(weight.defined(), "[conv2d] the packed weights are empty");
  MIXPREC_CHECK(opt.groups == weight.groups_, "[conv2d] weights were packed for ", weight.groups_,
                " groups, options ask for ", opt.groups);
  MIXPREC_CHECK(x.dtype() == weight.x_dtype_, "[conv2d] weights were packed for ",
                dtype_name(weight.x_dtype_), " inputs, x is ", dtype_name(x.dtype()),
                "; pack them for this dtype");
  MIXPREC_CHECK(weight.level_ == active_isa(), "[conv2d] weights were packed at kernel level ",
                isa_name(weight.level_), " but the active level is ", isa_name(active_isa()),
                "; pack them again");
  const Geometry g = check(x, weight.shape_, weight.weight_dtype_, bias, out, opt);
  conv2d_impl(x, weight.weight_, weight.weight_dtype_,
              weight.packed_.empty() ? nullptr : &weight.packed_, bias, out, opt, g);
}

}  // namespace mixprec::kernels
