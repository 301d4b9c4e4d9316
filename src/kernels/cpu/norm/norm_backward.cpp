// Norm backward entry points: checks, layouts, the split over threads and the fixed-order
// combination of per-block parameter sums; the per-level kernels (norm_backward_impl.h) do the
// passes over the data.
#include "mixprec/kernels/norm_backward.h"

#include <algorithm>
#include <vector>

#include "../isa/family_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "norm_backward_kernels.h"

namespace mixprec::kernels {
namespace {

using norm_backward_detail::GroupPlan;
using norm_backward_detail::NormBackwardKernels;
using norm_backward_detail::RowsPlan;

constexpr int64_t kGrainElements = int64_t{1} << 14;  // per thread chunk, at least
constexpr int64_t kRowsPerBlock = 16;  // LayerNorm rows whose parameter sums share one block

const NormBackwardKernels& kernels_for(bool f64) {
  using namespace norm_backward_detail;
  return family_kernels<NormBackwardKernels, norm_backward_scalar, norm_backward_avx2,
                        norm_backward_avx512, norm_backward_f64>(f64);
}

// t (any float dtype, any layout) as a flat array of L.
template <typename L>
std::vector<L> lane_array(const Tensor& t) {
  if (!t.defined()) return {};
  const Tensor c = t.to(sizeof(L) == 8 ? DType::F64 : DType::F32).contiguous();
  const L* p = c.data<L>();
  return std::vector<L>(p, p + c.numel());
}

// Where a kernel writes dx: `dx` itself when it has the layout the kernel walks, else a
// temporary copied into it at the end.
struct DxTarget {
  Tensor dx, work;
  DxTarget(const Tensor& target, MemoryFormat format) : dx(target) {
    if (!target.defined()) return;
    work = target.is_contiguous(format) ? target
                                        : Tensor::empty(target.shape(), target.dtype(), format);
  }
  void* data() const { return work.defined() ? work.data_ptr() : nullptr; }
  DType dtype() const { return work.defined() ? work.dtype() : DType::F32; }
  void finish() const {
    if (work.defined() && !work.shares_storage(dx)) dx.copy_(work);
  }
};

// x and grad as the kernels read them, dx where they write.
norm_backward_detail::BackwardOperands operands(const Tensor& xs, const Tensor& gs,
                                                const DxTarget& dx) {
  return {xs.data_ptr(), xs.dtype(), gs.data_ptr(), gs.dtype(), dx.data(), dx.dtype()};
}

// Zeroed per-block parameter sums, kept per calling thread: a fresh buffer of this size (a
// few hundred KiB for a transformer's LayerNorm) would be a new mapping, and page faults,
// at every call.
template <typename L>
std::vector<L>& zeroed_parts(int slot, std::size_t n) {
  thread_local std::vector<L> parts[2];
  std::vector<L>& v = parts[slot];
  v.assign(n, L(0));
  return v;
}

// out = sum over `parts` blocks of [width] lanes, in block order, in f64; rounded once.
template <typename L>
void write_sums(const std::vector<L>& parts, int64_t blocks, int64_t width, const Tensor& out) {
  if (!out.defined()) return;
  std::vector<double> acc(static_cast<std::size_t>(width), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < width; ++j)
      acc[static_cast<std::size_t>(j)] += parts[static_cast<std::size_t>(b * width + j)];
  out.copy_(Tensor::from_buffer(acc.data(), out.shape(), DType::F64));
}

void check_grads(const Tensor& x, const Tensor& grad, const NormGrads& out, const Tensor& weight,
                 const Tensor& bias, const char* op) {
  MIXPREC_CHECK(grad.shape() == x.shape(), "[", op, "] grad has shape ",
                shape_to_string(grad.shape()), ", expected x's ", shape_to_string(x.shape()));
  MIXPREC_CHECK(!out.dx.defined() || out.dx.shape() == x.shape(), "[", op, "] dx has shape ",
                shape_to_string(out.dx.shape()), ", expected ", shape_to_string(x.shape()));
  MIXPREC_CHECK(
      !out.dweight.defined() || (weight.defined() && out.dweight.shape() == weight.shape()), "[",
      op, "] dweight needs a weight of its shape");
  MIXPREC_CHECK(!out.dbias.defined() || (bias.defined() && out.dbias.shape() == bias.shape()), "[",
                op, "] dbias needs a bias of its shape");
}

template <typename L>
void rows_backward(const Tensor& x, const Tensor& grad, int64_t len, const Tensor& weight, bool rms,
                   const NormStats& stats, const NormGrads& out) {
  const bool f64 = sizeof(L) == 8;
  const int64_t rows = len > 0 ? x.numel() / len : 0;
  const Tensor xs = x.contiguous(), gs = grad.contiguous();
  const DxTarget dx(out.dx, MemoryFormat::Contiguous);
  const std::vector<L> w = lane_array<L>(weight), mean = lane_array<L>(rms ? Tensor() : stats.mean),
                       rstd = lane_array<L>(stats.rstd);
  const RowsPlan plan{operands(xs, gs, dx),
                      w.empty() ? nullptr : w.data(),
                      mean.empty() ? nullptr : mean.data(),
                      rstd.data(),
                      rows,
                      len,
                      rms};
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const bool want_w = out.dweight.defined(), want_b = out.dbias.defined();
  std::vector<L>& part_w = zeroed_parts<L>(0, want_w ? static_cast<std::size_t>(blocks * len) : 0);
  std::vector<L>& part_b = zeroed_parts<L>(1, want_b ? static_cast<std::size_t>(blocks * len) : 0);
  const NormBackwardKernels& k = kernels_for(f64);
  parallel_for(0, blocks,
               std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, kRowsPerBlock * len)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t b = lo; b < hi; ++b)
                   k.rows(plan, b * kRowsPerBlock, std::min(rows, (b + 1) * kRowsPerBlock),
                          want_w ? part_w.data() + b * len : nullptr,
                          want_b ? part_b.data() + b * len : nullptr);
               });
  dx.finish();
  write_sums(part_w, blocks, len, out.dweight);
  write_sums(part_b, blocks, len, out.dbias);
}

template <typename L>
void groups_backward(const Tensor& x, const Tensor& grad, int64_t groups, const Tensor& weight,
                     const Tensor& bias, Activation activation, const NormStats& stats,
                     const NormGrads& out) {
  const bool f64 = sizeof(L) == 8;
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / std::max<int64_t>(1, n * c);
  const bool nhwc =
      x.dim() == 4 && x.is_contiguous(MemoryFormat::ChannelsLast) && !x.is_contiguous();
  const MemoryFormat format = nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  const Tensor xs = x.contiguous(format), gs = grad.contiguous(format);
  const DxTarget dx(out.dx, format);
  const std::vector<L> w = lane_array<L>(weight), b = lane_array<L>(bias),
                       mean = lane_array<L>(stats.mean), rstd = lane_array<L>(stats.rstd);
  const GroupPlan plan{operands(xs, gs, dx),
                       w.empty() ? nullptr : w.data(),
                       b.empty() ? nullptr : b.data(),
                       mean.data(),
                       rstd.data(),
                       n,
                       c,
                       hw,
                       groups,
                       activation};
  const bool want_w = out.dweight.defined(), want_b = out.dbias.defined();
  std::vector<L>& part_w = zeroed_parts<L>(0, want_w ? static_cast<std::size_t>(n * c) : 0);
  std::vector<L>& part_b = zeroed_parts<L>(1, want_b ? static_cast<std::size_t>(n * c) : 0);
  L* pw = want_w ? part_w.data() : nullptr;
  L* pb = want_b ? part_b.data() : nullptr;
  const NormBackwardKernels& k = kernels_for(f64);
  if (nhwc) {
    parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
      // g' of one sample, kept per thread: a fresh MiB-sized buffer per call would be a new
      // mapping and page faults every step.
      thread_local std::vector<L> scratch;
      if (scratch.size() < static_cast<std::size_t>(hw * c))
        scratch.resize(static_cast<std::size_t>(hw * c));
      for (int64_t i = lo; i < hi; ++i) k.sample_nhwc(plan, i, scratch.data(), pw, pb);
    });
  } else {
    const int64_t per_unit = c / groups * hw;
    parallel_for(0, n * groups,
                 std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, per_unit)),
                 [&](int64_t lo, int64_t hi) { k.groups_nchw(plan, lo, hi, pw, pb); });
  }
  dx.finish();
  write_sums(part_w, n, c, out.dweight);
  write_sums(part_b, n, c, out.dbias);
}

}  // namespace

void layer_norm_backward(const Tensor& x, const Tensor& grad, const Shape& normalized_shape,
                         const Tensor& weight, bool rms, const NormStats& stats,
                         const NormGrads& out) {
  const char* op = rms ? "rms_norm_backward" : "layer_norm_backward";
  check_grads(x, grad, out, weight, out.dbias, op);  // dbias: sum of grad, no bias needed
  MIXPREC_CHECK(!out.dbias.defined() || out.dbias.shape() == normalized_shape, "[", op,
                "] dbias has shape ", shape_to_string(out.dbias.shape()), ", expected ",
                shape_to_string(normalized_shape));
  const auto nd = static_cast<int64_t>(normalized_shape.size());
  MIXPREC_CHECK(nd <= x.dim() && Shape(x.shape().end() - nd, x.shape().end()) == normalized_shape,
                "[", op, "] normalized_shape ", shape_to_string(normalized_shape),
                " is not the trailing dims of x ", shape_to_string(x.shape()));
  const int64_t len = shape_numel(normalized_shape), rows = len > 0 ? x.numel() / len : 0;
  MIXPREC_CHECK(stats.rstd.defined() && stats.rstd.numel() == rows &&
                    (rms || (stats.mean.defined() && stats.mean.numel() == rows)),
                "[", op, "] needs the forward's statistics (", rows, " rows)");
  MIXPREC_CHECK(!weight.defined() || weight.shape() == normalized_shape, "[", op,
                "] weight has shape ", shape_to_string(weight.shape()), ", expected ",
                shape_to_string(normalized_shape));
  if (x.dtype() == DType::F64 || grad.dtype() == DType::F64)
    rows_backward<double>(x, grad, len, weight, rms, stats, out);
  else
    rows_backward<float>(x, grad, len, weight, rms, stats, out);
}

void group_norm_backward(const Tensor& x, const Tensor& grad, int64_t groups, const Tensor& weight,
                         const Tensor& bias, Activation activation, const NormStats& stats,
                         const NormGrads& out) {
  constexpr const char* op = "group_norm_backward";
  check_grads(x, grad, out, weight, bias, op);
  MIXPREC_CHECK(x.dim() >= 2 && groups >= 1 && x.size(1) % groups == 0, "[", op, "] x ",
                shape_to_string(x.shape()), " cannot be split into ", groups, " groups");
  MIXPREC_CHECK(activation == Activation::None || activation == Activation::SiLU, "[", op,
                "] the fused activation must be None or SiLU");
  const int64_t units = x.size(0) * groups;
  MIXPREC_CHECK(stats.mean.defined() && stats.rstd.defined() && stats.mean.numel() == units &&
                    stats.rstd.numel() == units,
                "[", op, "] needs the forward's statistics [N, G] = [", x.size(0), ", ", groups,
                "]");
  for (const Tensor* p : {&weight, &bias})
    MIXPREC_CHECK(!p->defined() || p->shape() == Shape{x.size(1)}, "[", op,
                  "] weight and bias must be [C] = [", x.size(1), "]");
  if (x.dtype() == DType::F64 || grad.dtype() == DType::F64)
    groups_backward<double>(x, grad, groups, weight, bias, activation, stats, out);
  else
    groups_backward<float>(x, grad, groups, weight, bias, activation, stats, out);
}

}  // namespace mixprec::kernels
