// Normalisation front-ends and their backward. With xhat = (x - mean) * rstd over one group of
// M elements and gy = dL/dy * weight (the affine scale):
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))     LayerNorm, GroupNorm
//   dx = rstd * (gy - xhat * mean(gy * xhat)), xhat = x rstd  RMSNorm (no centring)
//   dweight = sum(dL/dy * xhat), dbias = sum(dL/dy) over everything but the channel
#include "mixprec/kernels/norm.h"

#include <cmath>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/parallel.h"
#include "mixprec/ops/functional.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::Activation;

enum class NormKind { Layer, Rms, Group };

// Rows [R, M] of x in the accumulation type, parameters per column (Layer/Rms) or per channel
// (Group: x [N, C, S] -> groups of Cg * S elements, parameter index = column / S).
struct NormBackward final : autograd::Node {
  NormKind kind;
  Tensor x, weight, bias;
  Shape normalized_shape;
  int64_t groups = 1;
  double eps = 1e-5;
  Activation activation = Activation::None;
  std::string_view name() const override {
    return kind == NormKind::Layer ? "LayerNormBackward"
           : kind == NormKind::Rms ? "RMSNormBackward"
                                   : "GroupNormBackward";
  }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    if (x.dtype() == DType::F64) return run<double>(grads[0], DType::F64);
    return run<float>(grads[0], DType::F32);
  }

  template <typename T>
  std::vector<Tensor> run(const Tensor& grad, DType acc) {
    // NCHW-contiguous copies: groups and rows are contiguous runs.
    const Tensor xs = x.to(acc).contiguous(), gs = grad.to(acc).contiguous();
    const Tensor ws = weight.defined() ? weight.to(acc).contiguous() : Tensor();
    const Tensor bs = bias.defined() ? bias.to(acc).contiguous() : Tensor();
    int64_t rows, m, per_param;  // groups, elements per group, consecutive elements per parameter
    if (kind == NormKind::Group) {
      const int64_t c = x.size(1), spatial = x.numel() / (x.size(0) * c);
      rows = x.size(0) * groups;
      m = c / groups * spatial;
      per_param = spatial;
    } else {
      m = shape_numel(normalized_shape);
      rows = x.numel() / std::max<int64_t>(1, m);
      per_param = 1;
    }
    const int64_t params = kind == NormKind::Group ? x.size(1) : m;
    Tensor dx = Tensor::empty(xs.shape(), acc);
    std::vector<T> dw(static_cast<std::size_t>(params), T(0)),
        db(static_cast<std::size_t>(params), T(0));
    const T* xp = xs.data<T>();
    const T* gp = gs.data<T>();
    const T* wp = ws.defined() ? ws.data<T>() : nullptr;
    const T* bp = bs.defined() ? bs.data<T>() : nullptr;
    T* dxp = dx.data<T>();
    // Parameter index of element j of group r.
    auto param_of = [&](int64_t r, int64_t j) {
      return kind == NormKind::Group ? (r % groups) * (m / per_param) + j / per_param : j;
    };
    std::vector<T> gy(static_cast<std::size_t>(m)), xhat(static_cast<std::size_t>(m));
    for (int64_t r = 0; r < rows; ++r) {  // serial: dw/db accumulate across groups
      const T* xr = xp + r * m;
      const T* gr = gp + r * m;
      T mean = 0, sq = 0;
      if (kind != NormKind::Rms) {
        for (int64_t j = 0; j < m; ++j) mean += xr[j];
        mean /= T(m);
      }
      for (int64_t j = 0; j < m; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
      const T rstd = T(1) / std::sqrt(sq / T(m) + T(eps));
      T mean_gy = 0, mean_gyx = 0;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t pi = param_of(r, j);
        const T xh = (xr[j] - mean) * rstd;
        T g = gr[j];
        if (activation == Activation::SiLU) {  // fused SiLU after the affine step
          const T y = xh * (wp ? wp[pi] : T(1)) + (bp ? bp[pi] : T(0));
          const T s = T(1) / (T(1) + std::exp(-y));
          g *= s * (T(1) + y * (T(1) - s));
        }
        dw[static_cast<std::size_t>(pi)] += g * xh;
        db[static_cast<std::size_t>(pi)] += g;
        gy[static_cast<std::size_t>(j)] = g * (wp ? wp[pi] : T(1));
        xhat[static_cast<std::size_t>(j)] = xh;
        mean_gy += gy[static_cast<std::size_t>(j)];
        mean_gyx += gy[static_cast<std::size_t>(j)] * xh;
      }
      mean_gy = kind == NormKind::Rms ? T(0) : mean_gy / T(m);
      mean_gyx /= T(m);
      for (int64_t j = 0; j < m; ++j)
        dxp[r * m + j] = rstd * (gy[static_cast<std::size_t>(j)] - mean_gy -
                                 xhat[static_cast<std::size_t>(j)] * mean_gyx);
    }
    Tensor dx_out = Tensor::empty_like(x, MemoryFormat::Preserve);
    dx_out.copy_(dx);
    Tensor dw_out, db_out;
    if (weight.defined())
      dw_out = Tensor::from_buffer(dw.data(), weight.shape(), acc).to(weight.dtype());
    if (bias.defined()) db_out = Tensor::from_buffer(db.data(), bias.shape(), acc).to(bias.dtype());
    return {dx_out, dw_out, db_out};
  }
  void release_saved() override { x = weight = bias = Tensor(); }
};

Tensor record_norm(Tensor out, std::shared_ptr<NormBackward> node, const Tensor& x, const Tensor& w,
                   const Tensor& b) {
  if (autograd::needs_grad({&x, &w, &b})) {
    node->x = x.detach();
    node->weight = w.detach();
    node->bias = b.detach();
    autograd::record(node, {&x, &w, &b}, {&out});
  }
  return out;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::LayerNorm, x_in, weight_in, bias_in);
  ops_detail::check_float("layer_norm", x);
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  {
    NoGrad no_grad;
    kernels::layer_norm(x, normalized_shape, weight, bias, eps, out);
  }
  auto node = std::make_shared<NormBackward>();
  node->kind = NormKind::Layer;
  node->normalized_shape = normalized_shape;
  node->eps = eps;
  return record_norm(out, node, x, weight, bias);
}

Tensor rms_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                double eps) {
  const auto [x, weight] = amp::autocast_args(amp::AutocastOp::RMSNorm, x_in, weight_in);
  ops_detail::check_float("rms_norm", x);
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  {
    NoGrad no_grad;
    kernels::rms_norm(x, normalized_shape, weight, eps, out);
  }
  auto node = std::make_shared<NormBackward>();
  node->kind = NormKind::Rms;
  node->normalized_shape = normalized_shape;
  node->eps = eps;
  return record_norm(out, node, x, weight, Tensor());
}

Tensor group_norm(const Tensor& x_in, int64_t groups, const Tensor& weight_in,
                  const Tensor& bias_in, double eps, Activation activation) {
  const auto [x, weight, bias] =
      amp::autocast_args(amp::AutocastOp::GroupNorm, x_in, weight_in, bias_in);
  ops_detail::check_float("group_norm", x);
  MIXPREC_CHECK(activation == Activation::None || activation == Activation::SiLU,
                "[group_norm] the fused activation must be None or SiLU");
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  {
    NoGrad no_grad;
    kernels::group_norm(x, groups, weight, bias, eps, out, activation);
  }
  auto node = std::make_shared<NormBackward>();
  node->kind = NormKind::Group;
  node->groups = groups;
  node->eps = eps;
  node->activation = activation;
  return record_norm(out, node, x, weight, bias);
}

}  // namespace mixprec
