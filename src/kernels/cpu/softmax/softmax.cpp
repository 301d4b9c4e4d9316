// Softmax entry points: checks, the [outer, len, inner] plan around the dim, the split over
// threads; the per-level kernels (softmax_impl.h) normalise whole lines.
#include "mixprec/kernels/softmax.h"

#include <algorithm>

#include "../elementwise/elementwise_frontend.h"
#include "../isa/family_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "softmax_kernels.h"

namespace mixprec::kernels {
namespace {

using softmax_detail::SoftmaxKernels;
using softmax_detail::SoftmaxPlan;

constexpr int64_t kGrainElements = int64_t{1} << 14;  // per thread chunk, at least

const SoftmaxKernels& kernels_for(bool f64) {
  using namespace softmax_detail;
  return family_kernels<SoftmaxKernels, softmax_scalar, softmax_avx2, softmax_avx512, softmax_f64>(
      f64);
}

void run_softmax(bool log, const char* op, const Tensor& x, int64_t dim, const Tensor& out) {
  frontend::check_floating(x, op, "x");
  frontend::check_floating(out, op, "out");
  frontend::check_shape(out, x.shape(), op, "out", "x's shape");
  const int64_t d = normalize_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  if (x.numel() == 0) return;
  const Tensor xc = frontend::staged_input(x, out);
  const frontend::StagedOutput staged(out);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= x.size(i);
    if (i > d) inner *= x.size(i);
  }
  const int64_t len = x.dim() == 0 ? 1 : x.size(d);
  const SoftmaxPlan plan{
      xc.data_ptr(), xc.dtype(), staged.work().data_ptr(), out.dtype(), outer, len, inner, log};
  const SoftmaxKernels& k = kernels_for(frontend::any_f64({&x, &out}));
  const int64_t units = inner == 1 ? outer : outer * ((inner + k.strip_width - 1) / k.strip_width);
  const int64_t unit_elements = len * std::min<int64_t>(inner, k.strip_width);
  parallel_for(0, units, std::max<int64_t>(1, kGrainElements / unit_elements),
               [&](int64_t lo, int64_t hi) { k.lines(plan, lo, hi); });
  staged.finish();
}

}  // namespace

void softmax(const Tensor& x, int64_t dim, const Tensor& out) {
  run_softmax(false, "softmax", x, dim, out);
}

void log_softmax(const Tensor& x, int64_t dim, const Tensor& out) {
  run_softmax(true, "log_softmax", x, dim, out);
}

}  // namespace mixprec::kernels
