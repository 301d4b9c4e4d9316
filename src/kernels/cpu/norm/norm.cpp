// Norm entry points: checks, layouts, the split over threads; the per-level kernels
// (norm_impl.h) compute statistics and write.
//
// Channels_last GroupNorm runs in three parallel phases over (sample, chunk of HW rows) units:
// per-channel sums, per-channel sums of squared deviations from the group mean, then the
// normalising write. Chunk results are combined here in f64, which also lets a batch of one
// (video inference) use every thread.
#include "mixprec/kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../elementwise/elementwise_frontend.h"
#include "../isa/family_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"
#include "norm_kernels.h"

namespace mixprec::kernels {
namespace {

using norm_detail::GroupNormPlan;
using norm_detail::LayerNormPlan;
using norm_detail::NormKernels;

constexpr int64_t kGrainElements = int64_t{1} << 14;  // per thread chunk, at least
constexpr int64_t kStatUnits = 16;  // channels_last group-norm statistics: units of work

const NormKernels& kernels_for(bool f64) {
  using namespace norm_detail;
  return family_kernels<NormKernels, norm_scalar, norm_avx2, norm_avx512, norm_f64>(f64);
}

// A [n] array in the kernels' lane type (f32, or f64 on the f64 path).
class LaneArray {
 public:
  LaneArray(bool f64, int64_t n) : f64_(f64) {
    if (f64)
      doubles_.resize(static_cast<std::size_t>(n));
    else
      floats_.resize(static_cast<std::size_t>(n));
  }
  void set(int64_t i, double v) {
    if (f64_)
      doubles_[static_cast<std::size_t>(i)] = v;
    else
      floats_[static_cast<std::size_t>(i)] = static_cast<float>(v);
  }
  const void* at(int64_t i) const {
    return f64_ ? static_cast<const void*>(doubles_.data() + i)
                : static_cast<const void*>(floats_.data() + i);
  }

 private:
  bool f64_;
  std::vector<float> floats_;
  std::vector<double> doubles_;
};

void check_eps(double eps, const char* op) {
  MIXPREC_CHECK(std::isfinite(eps) && eps >= 0.0, "[", op, "] eps must be finite and >= 0, got ",
                eps);
}

// weight or bias: undefined (absent), or `shape` in any float dtype, made contiguous.
Tensor parameter(const Tensor& p, const Shape& shape, const Tensor& out, const char* op,
                 const char* role, const char* why) {
  if (!p.defined()) return p;
  frontend::check_floating(p, op, role);
  frontend::check_shape(p, shape, op, role, why);
  return frontend::staged_input(p, out);
}

void check_stats(const NormStats& stats, const Shape& shape, const char* op, const char* why) {
  for (const auto& [t, role] :
       {std::pair{&stats.mean, "stats.mean"}, std::pair{&stats.rstd, "stats.rstd"}})
    if (t->defined()) {
      frontend::check_floating(*t, op, role);
      frontend::check_shape(*t, shape, op, role, why);
    }
}

void write_stats(std::vector<double>& values, const Tensor& t) {
  if (t.defined() && t.numel() > 0)
    t.copy_(Tensor::from_buffer(values.data(), t.shape(), DType::F64));
}

// The tensors of a norm as its plan holds them: x, the staged output (in out's dtype) and the
// optional weight and bias.
norm_detail::NormOperands operands(const Tensor& x, const frontend::StagedOutput& staged,
                                   const Tensor& out, const Tensor& w, const Tensor& b) {
  return {x.data_ptr(),
          x.dtype(),
          staged.work().data_ptr(),
          out.dtype(),
          w.defined() ? w.data_ptr() : nullptr,
          w.defined() ? w.dtype() : DType::F32,
          b.defined() ? b.data_ptr() : nullptr,
          b.defined() ? b.dtype() : DType::F32};
}

double* slot(std::vector<double>& v, const Tensor& t, int64_t n) {
  if (!t.defined()) return nullptr;
  v.resize(static_cast<std::size_t>(n));
  return v.data();
}

void layer_norm_impl(bool rms, const char* op, const Tensor& x, const Shape& normalized_shape,
                     const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                     const NormStats& stats) {
  frontend::check_floating(x, op, "x");
  frontend::check_floating(out, op, "out");
  frontend::check_shape(out, x.shape(), op, "out", "x's shape");
  check_eps(eps, op);
  const std::size_t k = normalized_shape.size();
  MIXPREC_CHECK(
      k <= x.shape().size() && std::equal(normalized_shape.begin(), normalized_shape.end(),
                                          x.shape().end() - static_cast<std::ptrdiff_t>(k)),
      "[", op, "] normalized_shape ", shape_to_string(normalized_shape),
      " does not match the last dims of x ", shape_to_string(x.shape()));
  const Tensor w = parameter(weight, normalized_shape, out, op, "weight", "the normalized shape");
  const Tensor b = parameter(bias, normalized_shape, out, op, "bias", "the normalized shape");
  const Shape leading(x.shape().begin(), x.shape().end() - static_cast<std::ptrdiff_t>(k));
  check_stats(stats, leading, op, "x's leading dims");
  const int64_t rows = shape_numel(leading, op), len = shape_numel(normalized_shape, op);
  if (rows == 0) return;

  const Tensor xc = frontend::staged_input(x, out);
  const frontend::StagedOutput staged(out);
  std::vector<double> mean, rstd;
  const LayerNormPlan plan{
      operands(xc, staged, out, w, b), rows, len, eps, rms, slot(mean, stats.mean, rows),
      slot(rstd, stats.rstd, rows)};
  const NormKernels& kern = kernels_for(frontend::any_f64({&x, &out, &w, &b}));
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, len)),
               [&](int64_t lo, int64_t hi) { kern.layer_norm(plan, lo, hi); });
  staged.finish();
  write_stats(mean, stats.mean);
  write_stats(rstd, stats.rstd);
}

// The three channels_last phases (see the top of the file); fills mean and rstd [N, G].
void group_norm_channels_last(const NormKernels& kern, const GroupNormPlan& plan, bool f64,
                              const Tensor& w, const Tensor& b, std::vector<double>& mean,
                              std::vector<double>& rstd) {
  const int64_t n = plan.n, c = plan.c, g = plan.groups, hw = plan.hw, per_group = c / g;
  // Row chunks per sample: about kStatUnits units in all (enough for the threads to share them
  // out), at least kGrainElements each; never a function of the thread count, which would
  // change how the partial sums add up.
  const int64_t chunks =
      std::clamp<int64_t>(std::min((kStatUnits + n - 1) / n, hw * c / kGrainElements), 1, hw);
  const auto count = static_cast<double>(per_group * hw);
  std::vector<double> partial(static_cast<std::size_t>(n * chunks * c));  // [N, chunks, C]
  auto for_units = [&](const auto& body) {
    parallel_for(0, n * chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t u = lo; u < hi; ++u)
        body(u / chunks, hw * (u % chunks) / chunks, hw * (u % chunks + 1) / chunks, u);
    });
  };
  auto group_means =
      [&](const LaneArray* center) {  // [N, G]: the mean over each group of the phase's sums
        for_units([&](int64_t s, int64_t r0, int64_t r1, int64_t u) {
          kern.channel_sums(plan, s, r0, r1, center ? center->at(s * c) : nullptr,
                            &partial[static_cast<std::size_t>(u * c)]);
        });
        std::vector<double> totals(static_cast<std::size_t>(n * g), 0.0);
        for (int64_t u = 0; u < n * chunks; ++u)
          for (int64_t ch = 0; ch < c; ++ch)
            totals[static_cast<std::size_t>(u / chunks * g + ch / per_group)] +=
                partial[static_cast<std::size_t>(u * c + ch)];
        for (double& t : totals) t /= count;
        return totals;
      };
  mean = group_means(nullptr);
  LaneArray center(f64, n * c), scale(f64, n * c), shift(f64, n * c);
  for (int64_t i = 0; i < n * c; ++i)
    center.set(i, mean[static_cast<std::size_t>(i / c * g + i % c / per_group)]);
  const std::vector<double> var = group_means(&center);
  rstd.resize(var.size());
  for (std::size_t i = 0; i < var.size(); ++i) rstd[i] = 1.0 / std::sqrt(var[i] + plan.eps);
  // Weight and bias in f64 (host vectors: no tensor is allocated on this path).
  std::vector<double> w64(static_cast<std::size_t>(c), 1.0), b64(static_cast<std::size_t>(c), 0.0);
  if (w.defined()) convert(w.data_ptr(), w.dtype(), w64.data(), DType::F64, w64.size());
  if (b.defined()) convert(b.data_ptr(), b.dtype(), b64.data(), DType::F64, b64.size());
  for (int64_t i = 0; i < n * c; ++i) {
    scale.set(i, rstd[static_cast<std::size_t>(i / c * g + i % c / per_group)] *
                     w64[static_cast<std::size_t>(i % c)]);
    shift.set(i, b64[static_cast<std::size_t>(i % c)]);
  }
  for_units([&](int64_t s, int64_t r0, int64_t r1, int64_t) {
    kern.channels_last_apply(plan, s, r0, r1, center.at(s * c), scale.at(s * c), shift.at(s * c));
  });
}

}  // namespace

void layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                const Tensor& bias, double eps, const Tensor& out, const NormStats& stats) {
  layer_norm_impl(false, "layer_norm", x, normalized_shape, weight, bias, eps, out, stats);
}

void rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps,
              const Tensor& out, const NormStats& stats) {
  layer_norm_impl(true, "rms_norm", x, normalized_shape, weight, Tensor(), eps, out, stats);
}

void group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                double eps, const Tensor& out, Activation activation, const NormStats& stats) {
  constexpr const char* kOp = "group_norm";
  frontend::check_floating(x, kOp, "x");
  frontend::check_floating(out, kOp, "out");
  MIXPREC_CHECK(x.dim() >= 2, "[group_norm] x has shape ", shape_to_string(x.shape()),
                ", expected at least 2 dims [N, C, ...]");
  frontend::check_shape(out, x.shape(), kOp, "out", "x's shape");
  check_eps(eps, kOp);
  const int64_t n = x.size(0), c = x.size(1);
  MIXPREC_CHECK(groups >= 1 && c % groups == 0, "[group_norm] ", groups,
                " groups do not divide the ", c, " channels of x ", shape_to_string(x.shape()));
  const Tensor w = parameter(weight, {c}, out, kOp, "weight", "the channel count");
  const Tensor b = parameter(bias, {c}, out, kOp, "bias", "the channel count");
  check_stats(stats, {n, groups}, kOp, "[N, groups]");
  if (x.numel() == 0) return;

  const MemoryFormat format = x.dim() == 4 ? x.suggest_memory_format() : MemoryFormat::Contiguous;
  const Tensor xc = frontend::staged_input(x, out, format);
  const frontend::StagedOutput staged(out, format);
  const bool f64 = frontend::any_f64({&x, &out, &w, &b});
  const NormKernels& kern = kernels_for(f64);
  std::vector<double> mean, rstd;
  const GroupNormPlan plan{operands(xc, staged, out, w, b),
                           n,
                           c,
                           x.numel() / (n * c),
                           groups,
                           eps,
                           activation,
                           slot(mean, stats.mean, n * groups),
                           slot(rstd, stats.rstd, n * groups)};
  if (format == MemoryFormat::ChannelsLast) {
    group_norm_channels_last(kern, plan, f64, w, b, mean, rstd);
  } else {
    const int64_t block = c / groups * plan.hw;
    parallel_for(0, n * groups, std::max<int64_t>(1, kGrainElements / block),
                 [&](int64_t lo, int64_t hi) { kern.group_norm(plan, lo, hi); });
  }
  staged.finish();
  write_stats(mean, stats.mean);
  write_stats(rstd, stats.rstd);
}

}  // namespace mixprec::kernels
