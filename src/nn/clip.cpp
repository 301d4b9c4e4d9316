#include "mixprec/nn/clip.h"

#include <algorithm>
#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/profiler.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/kernels/optim.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::nn {

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  MIXPREC_CHECK(norm_type > 0, "[clip_grad_norm] norm_type must be > 0 or inf, got ", norm_type);
  const bool inf = std::isinf(norm_type);
  double total = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const double part = kernels::norm_pow_sum(g, norm_type);
    if (inf)
      total = std::isnan(part) || std::isnan(total) ? part + total : std::max(total, part);
    else
      total += part;
  }
  if (inf || norm_type == 1.0) return total;
  return norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  const profiler::Timer timer("clip_grad_norm");
  MIXPREC_CHECK(max_norm >= 0 && !std::isnan(max_norm),
                "[clip_grad_norm] max_norm must be >= 0, got ", max_norm);
  const double norm = grad_norm(params, norm_type);
  if (!std::isfinite(norm)) {
    MIXPREC_CHECK(!error_if_nonfinite, "[clip_grad_norm] the total norm of order ", norm_type,
                  " of the gradients is ", norm,
                  " (a gradient holds inf or NaN); pass error_if_nonfinite = false to return it");
    return norm;
  }
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  NoGrad no_grad;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (g.defined()) kernels::axpby(coef, g, 0.0, g, g);
  }
  return norm;
}

}  // namespace mixprec::nn
