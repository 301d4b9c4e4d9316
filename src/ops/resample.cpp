// Upsampling and pooling front-ends. Backward: the adjoint of each resampling, accumulated in
// f32 (f64 for f64) over NCHW copies, then rounded once into x's dtype and layout.
#include <bit>
#include <cmath>
#include <cstring>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/core/parallel.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/conv.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::UpsampleMode;

MemoryFormat format_of(const Tensor& x) {
  return x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous()
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

enum class Resample { Nearest, Bilinear, AvgPool, MaxPool };

struct ResampleBackward final : autograd::Node {
  Resample kind;
  Tensor x;        // input (max pool needs it; others only its geometry)
  Tensor indices;  // max pool: i64 [N, C, OH, OW] flat h * W + w of each maximum
  int64_t kernel = 1;
  std::string_view name() const override { return "ResampleBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const Tensor g = grads[0].to(acc).contiguous();
    const Tensor idx = indices.defined() ? indices.contiguous() : Tensor();
    Tensor dx = Tensor::empty(x.shape(), acc);
    // One kernel for a graph's record: the node's members are released after the backward.
    capture::launch("resample_backward", {&g, idx.defined() ? &idx : nullptr}, {&dx},
                    [kind = kind, kernel = kernel](const capture::KernelArgs& k) {
                      const Tensor& d = k.out(0);
                      std::memset(d.data_ptr(), 0, d.nbytes());
                      visit_dtype(d.dtype(), [&](auto tag) {
                        using T = typename decltype(tag)::type;
                        if constexpr (std::is_floating_point_v<T>)
                          run<T>(kind, kernel, k.in(0), k.optional(1), d);
                      });
                    });
    Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
    out.copy_(dx);
    return {out};
  }

  // dx [N, C, H, W] (zeroed, contiguous) += the adjoint of the resampling of g [N, C, OH, OW].
  template <typename T>
  static void run(Resample kind, int64_t kernel, const Tensor& g, const Tensor* indices,
                  const Tensor& dx) {
    const int64_t nc = dx.size(0) * dx.size(1), h = dx.size(2), w = dx.size(3), oh = g.size(2),
                  ow = g.size(3);
    const T* gp = g.data<T>();
    T* dp = dx.data<T>();
    const int64_t* ip = indices != nullptr ? indices->data<int64_t>() : nullptr;
    const double sy = double(h) / double(oh), sx = double(w) / double(ow);
    parallel_for(0, nc, 1, [&](int64_t lo, int64_t hi) {  // planes are independent
      for (int64_t plane = lo; plane < hi; ++plane) {
        const T* gin = gp + plane * oh * ow;
        T* d = dp + plane * h * w;
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            const T v = gin[oy * ow + ox];
            switch (kind) {
              case Resample::Nearest:
                d[std::min(h - 1, int64_t(std::floor(oy * sy))) * w +
                  std::min(w - 1, int64_t(std::floor(ox * sx)))] += v;
                break;
              case Resample::Bilinear: {
                const double fy = std::max(0.0, (oy + 0.5) * sy - 0.5),
                             fx = std::max(0.0, (ox + 0.5) * sx - 0.5);
                const int64_t y0 = std::min(h - 1, int64_t(fy)), y1 = std::min(h - 1, y0 + 1);
                const int64_t x0 = std::min(w - 1, int64_t(fx)), x1 = std::min(w - 1, x0 + 1);
                const T ly = T(fy - double(y0)), lx = T(fx - double(x0));
                d[y0 * w + x0] += v * (1 - ly) * (1 - lx);
                d[y0 * w + x1] += v * (1 - ly) * lx;
                d[y1 * w + x0] += v * ly * (1 - lx);
                d[y1 * w + x1] += v * ly * lx;
                break;
              }
              case Resample::AvgPool:
                for (int64_t ky = 0; ky < kernel; ++ky)
                  for (int64_t kx = 0; kx < kernel; ++kx)
                    d[(oy * kernel + ky) * w + ox * kernel + kx] += v / T(kernel * kernel);
                break;
              case Resample::MaxPool:
                d[ip[plane * oh * ow + oy * ow + ox]] += v;
                break;
            }
          }
      }
    });
  }
  void release_saved() override { x = indices = Tensor(); }
};

Tensor finish(Tensor out, const Tensor& x, Resample kind, int64_t kernel,
              Tensor indices = Tensor()) {
  ops_detail::record_backward<ResampleBackward>({&x}, {&out}, [&](ResampleBackward& node) {
    node.kind = kind;
    node.x = x.detach();
    node.kernel = kernel;
    node.indices = std::move(indices);
  });
  return out;
}

}  // namespace

Tensor upsample(const Tensor& x_in, int64_t scale, UpsampleMode mode) {
  const auto [x] =
      amp::autocast_args(mode == UpsampleMode::Nearest ? amp::AutocastOp::UpsampleNearest
                                                       : amp::AutocastOp::UpsampleBilinear,
                         x_in);
  ops_detail::check_float("upsample", x);
  MIXPREC_CHECK(x.dim() == 4 && scale >= 1,
                "[upsample] expected x [N, C, H, W] and scale >= 1, got ",
                shape_to_string(x.shape()), " and ", scale);
  Tensor out = Tensor::empty({x.size(0), x.size(1), x.size(2) * scale, x.size(3) * scale},
                             x.dtype(), format_of(x));
  {
    NoGrad no_grad;
    capture::Fusions fusions;  // a nearest upsample by a power of two folds into a convolution
    if (mode == UpsampleMode::Nearest && std::has_single_bit(static_cast<uint64_t>(scale)))
      fusions.nearest_upsample = scale;
    capture::launch(
        "upsample", {&x}, {&out},
        [mode](const capture::KernelArgs& k) { kernels::upsample2d(k.in(0), k.out(0), mode); },
        capture::Aliasing::None, std::move(fusions));
  }
  return finish(out, x, mode == UpsampleMode::Nearest ? Resample::Nearest : Resample::Bilinear,
                scale);
}

namespace {

// Non-overlapping kernel x kernel windows of x [N, C, H, W]: checks x and gives the output shape.
Shape pooled_shape(const char* op, const Tensor& x, int64_t kernel) {
  ops_detail::check_float(op, x);
  MIXPREC_CHECK(x.dim() == 4 && kernel >= 1, "[", op, "] expected x [N, C, H, W] and kernel >= 1");
  return {x.size(0), x.size(1), kernels::pool_output_size(x.size(2), kernel, kernel, 0),
          kernels::pool_output_size(x.size(3), kernel, kernel, 0)};
}

}  // namespace

Tensor avg_pool2d(const Tensor& x_in, int64_t kernel) {
  const auto [x] = amp::autocast_args(amp::AutocastOp::AvgPool2d, x_in);
  const Shape shape = pooled_shape("avg_pool2d", x, kernel);
  kernels::Pool2dOptions o{kernel, kernel, kernel, kernel, 0, 0, true};
  Tensor out = Tensor::empty(shape, x.dtype(), format_of(x));
  {
    NoGrad no_grad;
    capture::launch("avg_pool2d", {&x}, {&out}, [o](const capture::KernelArgs& k) {
      kernels::avg_pool2d(k.in(0), k.out(0), o);
    });
  }
  return finish(out, x, Resample::AvgPool, kernel);
}

Tensor max_pool2d(const Tensor& x_in, int64_t kernel) {
  const auto [x] = amp::autocast_args(amp::AutocastOp::MaxPool2d, x_in);
  const Shape shape = pooled_shape("max_pool2d", x, kernel);
  kernels::Pool2dOptions o{kernel, kernel, kernel, kernel, 0, 0, true};
  Tensor out = Tensor::empty(shape, x.dtype(), format_of(x));
  Tensor indices = Tensor::empty(shape, DType::I64);
  {
    NoGrad no_grad;
    capture::launch("max_pool2d", {&x}, {&out, &indices}, [o](const capture::KernelArgs& k) {
      kernels::max_pool2d(k.in(0), k.out(0), o, k.outputs[1]);
    });
  }
  return finish(out, x, Resample::MaxPool, kernel, indices);
}

}  // namespace mixprec

namespace mixprec {
namespace {

// The adjoint of warp: both halves come from kernels::warp2d_backward in the accumulation dtype.
struct WarpBackward final : autograd::Node {
  Tensor x, flow;  // flow in the accumulation dtype
  DType flow_dtype = DType::F32;
  std::string_view name() const override { return "WarpBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = flow.dtype();
    Tensor dx = Tensor::zeros(x.shape(), acc);
    Tensor dflow = Tensor::empty(flow.shape(), acc);
    const Tensor g = grads[0].to(acc);
    capture::launch("warp_backward", {&g, &x, &flow}, {&dx, &dflow},
                    [](const capture::KernelArgs& k) {
                      kernels::warp2d_backward(k.in(0), k.in(1), k.in(2), k.out(0), k.out(1));
                    });
    Tensor dx_out = Tensor::empty_like(x, MemoryFormat::Preserve);
    dx_out.copy_(dx);
    return {dx_out, dflow.to(flow_dtype)};
  }
  void release_saved() override { x = flow = Tensor(); }
};

}  // namespace

Tensor warp(const Tensor& x_in, const Tensor& flow_in) {
  const auto [x, flow] = amp::autocast_args(amp::AutocastOp::Warp, x_in, flow_in);
  ops_detail::check_float("warp", x);
  ops_detail::check_float("warp", flow);
  const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor flow_acc = flow.to(acc);
  Tensor sampled = Tensor::empty(x.shape(), acc, format_of(x));
  {
    NoGrad no_grad;
    capture::launch("warp", {&x, &flow_acc}, {&sampled}, [](const capture::KernelArgs& k) {
      kernels::warp2d(k.in(0), k.in(1), k.out(0));
    });
  }
  Tensor out = sampled;
  if (x.dtype() != acc) {
    out = Tensor::empty_like(x, MemoryFormat::Preserve);
    out.copy_(sampled);
  }
  ops_detail::record_backward<WarpBackward>({&x, &flow}, {&out}, [&](WarpBackward& node) {
    node.x = x.detach();
    node.flow = flow_acc.detach();
    node.flow_dtype = flow.dtype();
  });
  return out;
}

}  // namespace mixprec
