// Loss entry points: checks (target bounds included, before any thread starts), the split
// over threads, and the f64 combination of per-row (cross-entropy) or per-chunk (MSE) results.
#include "mixprec/kernels/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../elementwise/elementwise_frontend.h"
#include "../isa/family_kernels.h"
#include "loss_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::kernels {
namespace {

using loss_detail::CrossEntropyPlan;
using loss_detail::LossKernels;

constexpr int64_t kGrainElements = int64_t{1} << 15;  // per thread chunk, at least
constexpr int64_t kMaxSumChunks = 256;                  // partial sums of one reduction, at most

const LossKernels& kernels_for(bool f64) {
  using namespace loss_detail;
  return family_kernels<LossKernels, loss_scalar, loss_avx2, loss_avx512, loss_f64>(f64);
}

// A reduced loss into out (f32 or f64, shape []): rounded once, no scalar tensor made (a graph
// replay allocates nothing).
void write_scalar(const Tensor& out, double value) {
  convert(&value, DType::F64, out.data_ptr(), out.dtype(), 1);
}

// out: shape [] (Mean, Sum) or `none_shape` (None), dtype f32 or f64 as the inputs decide.
void check_out(const Tensor& out, Reduction reduction, const Shape& none_shape, bool f64,
               const char* op) {
  frontend::check_defined(out, op, "out");
  const DType want = f64 ? DType::F64 : DType::F32;
  MIXPREC_CHECK(out.dtype() == want, "[", op, "] out has dtype ", dtype_name(out.dtype()),
                ", expected ", dtype_name(want), " (losses are f32, f64 for f64 inputs)");
  frontend::check_shape(
      out, reduction == Reduction::None ? none_shape : Shape{}, op, "out",
      reduction == Reduction::None ? "one loss per element, reduction none" : "a scalar loss");
}

// The checks cross_entropy and its backward share (logits [N, C], targets [N] in range or
// ignored, the options); returns the targets as i64 and the number of rows not ignored.
std::pair<Tensor, int64_t> checked_targets(const Tensor& logits, const Tensor& targets,
                                           const CrossEntropyOptions& options, const char* op) {
  frontend::check_floating(logits, op, "logits");
  frontend::check_defined(targets, op, "targets");
  MIXPREC_CHECK(logits.dim() == 2, "[", op, "] logits has shape ", shape_to_string(logits.shape()),
                ", expected [N, C]");
  const int64_t n = logits.size(0), c = logits.size(1);
  MIXPREC_CHECK(targets.dtype() == DType::I64 || targets.dtype() == DType::I32, "[", op,
                "] targets has dtype ", dtype_name(targets.dtype()),
                ", expected i64 or i32 class indices");
  frontend::check_shape(targets, {n}, op, "targets", "one class index per row of logits");
  MIXPREC_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, "[", op,
                "] label_smoothing must be in [0, 1], got ", options.label_smoothing);
  Tensor target64 = targets.to(DType::I64).contiguous();
  const int64_t* t = n > 0 ? target64.data<int64_t>() : nullptr;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == options.ignore_index) continue;
    MIXPREC_CHECK(t[i] >= 0 && t[i] < c, "[", op, "] target ", t[i], " at row ", i,
                  " is out of range for ", c, " classes (expected 0 <= target < ", c,
                  " or ignore_index ", options.ignore_index, ")");
    ++counted;
  }
  return {std::move(target64), counted};
}

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& out,
                   const CrossEntropyOptions& options) {
  constexpr const char* kOp = "cross_entropy";
  const auto [target64, counted] = checked_targets(logits, targets, options, kOp);
  const int64_t n = logits.size(0), c = logits.size(1);
  const bool f64 = logits.dtype() == DType::F64;
  check_out(out, options.reduction, {n}, f64, kOp);
  const int64_t* t = n > 0 ? target64.data<int64_t>() : nullptr;
  std::vector<double> losses(static_cast<std::size_t>(n));
  if (n > 0) {
    const Tensor x = frontend::staged_input(logits, Tensor());
    const CrossEntropyPlan plan{
        x.data_ptr(), x.dtype(), n, c, t, options.ignore_index, options.label_smoothing,
        losses.data()};
    const LossKernels& k = kernels_for(f64);
    parallel_for(0, n, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, c)),
                 [&](int64_t lo, int64_t hi) { k.cross_entropy(plan, lo, hi); });
  }
  if (options.reduction == Reduction::None) {
    if (n > 0) out.copy_(Tensor::from_buffer(losses.data(), {n}, DType::F64));
    return;
  }
  double total = 0.0;
  for (double l : losses) total += l;
  write_scalar(out, options.reduction == Reduction::Sum ? total : total / static_cast<double>(counted));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                            const Tensor& dx, const CrossEntropyOptions& options) {
  constexpr const char* kOp = "cross_entropy_backward";
  const auto [target64, counted] = checked_targets(logits, targets, options, kOp);
  const int64_t n = logits.size(0), c = logits.size(1);
  frontend::check_floating(grad, kOp, "grad");
  frontend::check_shape(grad, options.reduction == Reduction::None ? Shape{n} : Shape{}, kOp,
                        "grad", "the loss's shape");
  frontend::check_floating(dx, kOp, "dx");
  frontend::check_shape(dx, {n, c}, kOp, "dx", "logits' shape");
  MIXPREC_CHECK(dx.is_contiguous(), "[cross_entropy_backward] dx must be contiguous");
  if (n == 0 || c == 0) return;
  const Tensor row_weights =
      options.reduction == Reduction::None ? grad.to(DType::F64).contiguous() : Tensor();
  double weight = row_weights.defined() ? 0.0 : grad.item<double>();
  if (options.reduction == Reduction::Mean) weight /= static_cast<double>(counted);
  const Tensor x = frontend::staged_input(logits, dx);  // dx may be logits itself
  const loss_detail::CrossEntropyGradPlan plan{
      {x.data_ptr(), x.dtype(), n, c, target64.data<int64_t>(), options.ignore_index,
       options.label_smoothing, nullptr},
      row_weights.defined() ? row_weights.data<double>() : nullptr,
      weight,
      dx.data_ptr(),
      dx.dtype()};
  const LossKernels& k = kernels_for(frontend::any_f64({&logits, &dx}));
  parallel_for(0, n, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, c)),
               [&](int64_t lo, int64_t hi) { k.cross_entropy_grad(plan, lo, hi); });
}

void mse_loss(const Tensor& a, const Tensor& b, const Tensor& out, Reduction reduction) {
  constexpr const char* kOp = "mse_loss";
  frontend::check_floating(a, kOp, "a");
  frontend::check_floating(b, kOp, "b");
  frontend::check_shape(b, a.shape(), kOp, "b", "a's shape");
  const bool f64 = a.dtype() == DType::F64 || b.dtype() == DType::F64;
  check_out(out, reduction, a.shape(), f64, kOp);
  const Tensor ac = frontend::staged_input(a, out), bc = frontend::staged_input(b, out);
  const int64_t n = a.numel();
  const LossKernels& k = kernels_for(f64);
  const char* pa = static_cast<const char*>(ac.data_ptr());
  const char* pb = static_cast<const char*>(bc.data_ptr());
  const auto ea = static_cast<int64_t>(dtype_size(a.dtype())),
             eb = static_cast<int64_t>(dtype_size(b.dtype()));
  if (reduction == Reduction::None) {
    const frontend::StagedOutput staged(out);
    char* po = static_cast<char*>(staged.work().data_ptr());
    const auto eo = static_cast<int64_t>(dtype_size(out.dtype()));
    parallel_for(0, n, kGrainElements, [&](int64_t lo, int64_t hi) {
      k.squared_error(pa + lo * ea, a.dtype(), pb + lo * eb, b.dtype(), po + lo * eo, out.dtype(),
                      hi - lo);
    });
    staged.finish();
    return;
  }
  // One pairwise sum per chunk, the chunks added in f64. The split depends on n only (the
  // result must not change with the thread count).
  const int64_t chunks = std::clamp<int64_t>(n / kGrainElements, 1, kMaxSumChunks);
  std::vector<double> partial(static_cast<std::size_t>(chunks));
  parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t begin = n * i / chunks, end = n * (i + 1) / chunks;
      partial[static_cast<std::size_t>(i)] =
          k.squared_error_sum(pa + begin * ea, a.dtype(), pb + begin * eb, b.dtype(), end - begin);
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  write_scalar(out, reduction == Reduction::Sum ? total : total / static_cast<double>(n));
}

}  // namespace mixprec::kernels
