#pragma once
// What the per-layer precision planners (gpt_precision_plan.cpp, video_precision_plan.cpp)
// measure alike: the check that a model is planned from f32 weights, a relative RMS error over
// several tensors, and the median time of a piece of work.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/error.h"
#include "mixprec/nn/module.h"

namespace mixprec::models::plan_detail {

inline void require_f32_parameters(const nn::Module& model) {
  for (const Tensor& p : model.parameters())
    MIXPREC_CHECK(p.dtype() == DType::F32,
                  "[precision plan] the model must have f32 parameters to be planned, found ",
                  dtype_name(p.dtype()));
}

// The loss is multiplied by this before backward and the gradients divided by it after, as
// f16 training scales its loss: a module planned in f16 computes its backward in f16, whose
// small gradients would otherwise flush to zero and look like an f16 error. A power of two, so
// f32 and bf16 gradients come out the same bits.
inline constexpr double kGradientScale = 1024.0;

// sqrt(sum |y - ref|^2 / sum |ref|^2) over every pair both of which are defined.
inline double relative_error(const std::vector<Tensor>& y, const std::vector<Tensor>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i].defined() && ref[i].defined()) amp::accumulate_squared_error(y[i], ref[i], diff, norm);
  return std::sqrt(diff / norm);
}

// The median of `repetitions` timings of f(), in milliseconds.
template <typename F>
double median_ms(int repetitions, F&& f) {
  std::vector<double> ms;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mixprec::models::plan_detail
