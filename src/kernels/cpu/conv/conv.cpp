#include "mixprec/kernels/conv.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "conv_direct.h"
#include "conv_internal.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"
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
  MIXPREC_CHECK(opt.groups >= 1 && opt.stride_h >= 1 && opt.stride_w >= 1 && opt.dilation_h >= 1 &&
                    opt.dilation_w >= 1 && opt.pad_h >= 0 && opt.pad_w >= 0,
                "[conv2d] groups, strides and dilations must be >= 1 and paddings >= 0");
  Geometry g{x.size(0),  x.size(1), x.size(2), x.size(3),  w_shape[0], w_shape[2],
             w_shape[3], 0,         0,         opt.groups, 0,          0};
  MIXPREC_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "[conv2d] ", g.groups,
                " groups must divide the ", g.c, " input and ", g.o, " output channels");
  g.cg = g.c / g.groups;
  g.og = g.o / g.groups;
  MIXPREC_CHECK(w_shape[1] == g.cg, "[conv2d] weight ", shape_to_string(w_shape), " expects ",
                w_shape[1] * g.groups, " input channels, x ", shape_to_string(x.shape()), " has ",
                g.c);
  g.oh = conv_output_size(g.h, g.kh, opt.stride_h, opt.pad_h, opt.dilation_h);
  g.ow = conv_output_size(g.w, g.kw, opt.stride_w, opt.pad_w, opt.dilation_w);
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

// Depthwise (one input channel per group, one output per group): a direct loop per output
// row, vectorised over channels, f32 accumulators.
void depthwise(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out,
               const Conv2dOptions& opt, const Geometry& g) {
  // Weights as f32 [KH][KW][C]; bias as f32 [C].
  const Tensor wf = weight.to(DType::F32).permute({2, 3, 0, 1}).contiguous();
  const Tensor bf = bias != nullptr ? bias->to(DType::F32).contiguous() : Tensor::zeros({g.c});
  const float* wp = wf.data<float>();
  const float* bp = bf.data<float>();
  const Tensor xf = x.to(DType::F32);  // NHWC f32 copy: the loop reads each element KH*KW times
  const float* xp = xf.data<float>();
  const Tensor* residual = opt.residual;
  parallel_for(0, g.n * g.oh, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> acc(static_cast<std::size_t>(g.c));  // [C]
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t n = row / g.oh, oy = row % g.oh;
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        std::copy(bp, bp + g.c, acc.begin());
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * opt.stride_w - opt.pad_w + kx * opt.dilation_w;
            if (ix < 0 || ix >= g.w) continue;
            const float* xin = xp + ((n * g.h + iy) * g.w + ix) * g.c;
            const float* wk = wp + (ky * g.kw + kx) * g.c;
            for (int64_t c = 0; c < g.c; ++c) acc[c] += xin[c] * wk[c];
          }
        }
        for (int64_t c = 0; c < g.c; ++c) {
          float v = acc[c];
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
          if (residual != nullptr) v += static_cast<float>(residual->value({n, c, oy, ox}));
          acc[c] = v;
        }
        char* dst =
            static_cast<char*>(out.data_ptr()) +
            static_cast<std::size_t>(n * out.stride(0) + oy * out.stride(2) + ox * out.stride(3)) *
                out.element_size();
        convert_strided(acc.data(), DType::F32, 1, dst, out.dtype(), out.stride(1),
                        static_cast<std::size_t>(g.c));
      }
    }
  });
}

// Per-thread im2col tile, reused across calls.
Allocation& thread_patches() {
  thread_local Allocation patches;
  return patches;
}

std::atomic<Bf16ConvCompute> g_bf16_mode{Bf16ConvCompute::Auto};

// Auto's choice where AMX does not take a bf16 convolution: vdpbf16ps, or widening to f32 for
// the FMA kernel. A property of the core, decided from cpuid, never by timing (a timing probe on
// a busy machine flipped the choice from run to run, and with it the rounding and the memory
// peak): the cores measured so far run vdpbf16ps at the FMA's rate (AMD Zen 4: 2x the f32
// flops per instruction) except Intel's AMX cores (Sapphire Rapids and later), where it issues
// at half rate and widening to f32 is as fast (docs/PERFORMANCE.md).
Bf16ConvCompute bf16_dot_or_widen() {
  if (active_isa() < IsaLevel::Avx512Bf16) return Bf16ConvCompute::WidenToF32;
  const CpuFeatures& f = cpu_features();
  return f.amx_tile && f.amx_bf16 ? Bf16ConvCompute::WidenToF32 : Bf16ConvCompute::DotProduct;
}

// Whether AMX takes a bf16 group of cg channels under the mode in force.
bool use_amx(int64_t cg) {
  return active_isa() >= IsaLevel::Avx512Bf16 && cg % 32 == 0 &&
         bf16_conv_compute() == Bf16ConvCompute::Amx && conv_detail::amx_usable();
}

// The dtype A is packed for (and the direct kernel reads): bf16 with bf16 weights stays bf16
// for AMX and where vdpbf16ps pays; the AVX-512 levels widen other 16-bit inputs to f32 for the
// direct kernel (the bf16 kernels need bf16 weights). Below AVX-512 the input dtype is kept
// (the GEMM converts while packing).
DType pack_dtype_for(DType x_dtype, DType w_dtype, int64_t cg) {
  const IsaLevel level = active_isa();
  if (level < IsaLevel::Avx512 || x_dtype == DType::F32) return x_dtype;
  if (x_dtype == DType::BF16 && w_dtype == DType::BF16 && level >= IsaLevel::Avx512Bf16 &&
      cg % 2 == 0) {
    Bf16ConvCompute mode = bf16_conv_compute();
    if (mode == Bf16ConvCompute::Amx && !use_amx(cg)) mode = bf16_dot_or_widen();
    if (mode != Bf16ConvCompute::WidenToF32) return DType::BF16;
  }
  return DType::F32;
}

// Everything but depthwise and f64: per group, one GEMM (pointwise), the direct kernel, or
// im2col tiles times the packed weights.
void conv2d_packed(const Tensor& xs, const std::vector<PackedMatrix>& packed, const Tensor* bias,
                   const Tensor& ys, const Tensor* residual, const Conv2dOptions& opt,
                   const Geometry& g) {
  const int64_t m = g.n * g.oh * g.ow, k = g.kh * g.kw * g.cg;
  const Tensor bias_c = bias != nullptr ? bias->contiguous() : Tensor();
  const bool pointwise = g.kh == 1 && g.kw == 1 && opt.stride_h == 1 && opt.stride_w == 1 &&
                         opt.pad_h == 0 && opt.pad_w == 0 && g.groups == 1;
  const std::size_t ys_es = ys.element_size();
  Tensor widened;  // xs in the packed A dtype, made on first use
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const PackedMatrix& b = packed[static_cast<std::size_t>(grp)];
    const GroupOutput go{
        ys, bias_c.defined() ? &bias_c : nullptr, residual, opt.activation, g.o, grp * g.og};
    auto epilogue_at = [&](int64_t row0) {
      GemmEpilogue ep;
      ep.activation = opt.activation;
      if (bias_c.defined()) {
        ep.bias = static_cast<const char*>(bias_c.data_ptr()) +
                  static_cast<std::size_t>(grp * g.og) * bias_c.element_size();
        ep.bias_dtype = bias_c.dtype();
      }
      if (residual != nullptr) {
        ep.residual = static_cast<const char*>(residual->data_ptr()) +
                      static_cast<std::size_t>(row0 * g.o + grp * g.og) * residual->element_size();
        ep.residual_dtype = residual->dtype();
        ep.residual_ld = g.o;
      }
      return ep;
    };
    auto out_rows = [&](int64_t row0, int64_t rows) {
      return MutableMatrixView::row_major(
          static_cast<char*>(ys.data_ptr()) +
              static_cast<std::size_t>(row0 * g.o + grp * g.og) * ys_es,
          ys.dtype(), rows, g.og, g.o);
    };
    if (pointwise) {  // NHWC input is already the [N*H*W, C] patch matrix
      gemm_prepacked(MatrixView::row_major(xs.data_ptr(), xs.dtype(), m, k, g.c), b, out_rows(0, m),
                     epilogue_at(0));
      continue;
    }
    if (b.compute_dtype() == DType::BF16 && xs.dtype() == DType::BF16 && use_amx(g.cg) &&
        b.level() >= IsaLevel::Avx512Bf16) {
      const conv_detail::AmxConvProblem ap{static_cast<const uint16_t*>(xs.data_ptr()) + grp * g.cg,
                                           xs.stride(0),
                                           xs.stride(2),
                                           xs.stride(3),
                                           g.n,
                                           g.h,
                                           g.w,
                                           g.cg,
                                           g.kh,
                                           g.kw,
                                           g.oh,
                                           g.ow,
                                           opt.stride_h,
                                           opt.stride_w,
                                           opt.pad_h,
                                           opt.pad_w,
                                           opt.dilation_h,
                                           opt.dilation_w,
                                           b.panels(),
                                           g.og,
                                           conv_detail::tile_epilogue(go, 0, 0)};
      conv_detail::amx_conv(ap);
      continue;
    }
    if (const conv_detail::DirectKernel* dk =
            conv_detail::direct_kernel_for(b, b.a_dtype(), g.cg)) {
      if (!widened.defined())  // f32 for the f32 direct kernel: one pass, once per call
        widened = xs.dtype() == b.a_dtype() ? xs : xs.to(b.a_dtype());
      conv_detail::run_direct(*dk, widened, b, opt, g, grp, go);
      continue;
    }
    const int64_t tiles = (m + kTileRows - 1) / kTileRows;
    parallel_for(0, tiles, 1, [&](int64_t lo, int64_t hi) {
      Allocation& patches = thread_patches();
      patches.reserve(static_cast<std::size_t>(kTileRows * k) * xs.element_size());
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t r0 = t * kTileRows, rows = std::min(kTileRows, m - r0);
        gather_patch_rows(xs, opt, g, grp, r0, r0 + rows, patches.data());
        gemm_prepacked(MatrixView::row_major(patches.data(), xs.dtype(), rows, k, k), b,
                       out_rows(r0, rows), epilogue_at(r0));
      }
    });
  }
}

// Shared by both conv2d entries: f64, depthwise, or the packed paths on NHWC operands. weight
// is read only by f64 and depthwise (a packed weight keeps it for those); w_dtype is its dtype.
void conv2d_impl(const Tensor& x, const Tensor& weight, DType w_dtype,
                 const std::vector<PackedMatrix>* prepacked, const Tensor* bias, const Tensor& out,
                 const Conv2dOptions& opt, const Geometry& g) {
  if (out.numel() == 0) return;
  if (x.dtype() == DType::F64 || w_dtype == DType::F64 || out.dtype() == DType::F64) {
    MIXPREC_CHECK(x.dtype() == DType::F64 && w_dtype == DType::F64 && out.dtype() == DType::F64,
                  "[conv2d] f64 runs only when x, weight and out are all f64");
    return conv2d_f64(x, weight, bias, out, opt, g);
  }
  const Tensor xs = channels_last(x);
  const bool out_direct = out.is_contiguous(MemoryFormat::ChannelsLast);
  const Tensor ys =
      out_direct ? out : Tensor::empty(out.shape(), out.dtype(), MemoryFormat::ChannelsLast);
  Tensor residual;
  if (opt.residual != nullptr) residual = channels_last(*opt.residual);

  if (g.groups == g.c && g.groups == g.o) {
    Conv2dOptions o = opt;
    o.residual = residual.defined() ? &residual : nullptr;
    depthwise(xs, weight, bias, ys, o, g);
  } else if (prepacked != nullptr) {
    conv2d_packed(xs, *prepacked, bias, ys, residual.defined() ? &residual : nullptr, opt, g);
  } else {
    conv2d_packed(xs,
                  conv_detail::pack_groups(weight, pack_dtype_for(xs.dtype(), w_dtype, g.cg), g),
                  bias, ys, residual.defined() ? &residual : nullptr, opt, g);
  }
  if (!out_direct) out.copy_(ys);
}

}  // namespace

void set_bf16_conv_compute(Bf16ConvCompute mode) { g_bf16_mode.store(mode); }

Bf16ConvCompute bf16_conv_compute() {
  const Bf16ConvCompute mode = g_bf16_mode.load();
  if (mode != Bf16ConvCompute::Auto) return mode;
  return conv_detail::amx_usable() ? Bf16ConvCompute::Amx : bf16_dot_or_widen();
}

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
  const bool depthwise = groups == weight.size(0) && weight.size(1) == 1;
  if (weight.dtype() == DType::F64 || x_dtype == DType::F64 || depthwise) {
    p.weight_ = weight.clone(MemoryFormat::Contiguous);
  } else {
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
