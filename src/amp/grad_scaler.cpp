#include "mixprec/amp/grad_scaler.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/core/profiler.h"
#include "mixprec/core/parallel.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"

namespace mixprec::amp {

bool unscale_into(const Tensor& g, float inv_scale, const Tensor& out) {
  MIXPREC_CHECK(g.is_non_overlapping_and_dense(),
                "[GradScaler] gradients must be dense, got strides ", shape_to_string(g.strides()),
                " for shape ", shape_to_string(g.shape()));
  MIXPREC_CHECK(out.defined() && out.shape() == g.shape() && out.strides() == g.strides(),
                "[GradScaler] the unscaled gradient must have the gradient's shape and strides");
  const bool in_place = out.data_ptr() == g.data_ptr();
  MIXPREC_CHECK(in_place || out.dtype() == DType::F32 || out.dtype() == g.dtype(),
                "[GradScaler] unscaled gradients are written in place or as f32, got ",
                dtype_name(out.dtype()));
  MIXPREC_CHECK(!in_place || out.dtype() == g.dtype(),
                "[GradScaler] an in-place unscale keeps the gradient's dtype");
  std::atomic<bool> found{false};
  visit_dtype(g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16> || std::is_same_v<T, double>) {
      const T* src = static_cast<const T*>(g.data_ptr());
      const bool to_f32 = out.dtype() == DType::F32 && !std::is_same_v<T, float>;
      float* wide = to_f32 ? static_cast<float*>(out.data_ptr()) : nullptr;  // (numel,)
      T* same = to_f32 ? nullptr : static_cast<T*>(out.data_ptr());          // (numel,)
      parallel_for(0, g.numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
        bool bad = false;
        for (int64_t i = lo; i < hi; ++i) {
          if constexpr (std::is_same_v<T, double>) {
            const double v = src[i] * inv_scale;
            bad |= !std::isfinite(v);
            if (wide != nullptr)
              wide[i] = static_cast<float>(v);
            else
              same[i] = v;
          } else {
            const float v = static_cast<float>(src[i]) * inv_scale;
            bad |= !std::isfinite(v);
            if (wide != nullptr)
              wide[i] = v;
            else
              same[i] = static_cast<T>(v);
          }
        }
        if (bad) found.store(true, std::memory_order_relaxed);
      });
    } else {
      MIXPREC_CHECK(false, "[GradScaler] gradient of dtype ", dtype_name(g.dtype()),
                    " is not a float type");
    }
  });
  return found.load();
}

bool unscale_and_check_finite(const Tensor& g, float inv_scale) {
  return unscale_into(g, inv_scale, g);
}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(options.init_scale), hysteresis_left_(options.hysteresis) {
  MIXPREC_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale),
                "[GradScaler] init_scale must be a "
                "positive finite number, got ",
                options.init_scale);
  MIXPREC_CHECK(
      options.growth_factor > 1.0 && options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
      "[GradScaler] expected growth_factor > 1 and 0 < backoff_factor < 1");
  MIXPREC_CHECK(options.growth_interval >= 1 && options.hysteresis >= 1 && options.min_scale > 0,
                "[GradScaler] growth_interval and hysteresis must be >= 1 and min_scale > 0");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  const Tensor l = loss.dtype() == DType::F64 ? loss : loss.to(DType::F32);
  return mul(l, scale_);
}

void GradScaler::unscale(optim::Optimizer& opt) {
  const profiler::Timer timer("unscale_gradients");
  if (!options_.enabled) return;
  PerOptimizer& state = this_step_[&opt];
  MIXPREC_CHECK(!state.unscaled,
                "[GradScaler] unscale() has already been called on this optimizer since the last "
                "update()");
  MIXPREC_CHECK(!state.stepped, "[GradScaler] unscale() after step(): call it before stepping");
  NoGrad no_grad;
  const float inv = static_cast<float>(1.0 / scale_);
  for (const Tensor& p : opt.params()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.dtype() == DType::F16 || g.dtype() == DType::BF16) {
      // Divided and kept in f32: a 16-bit result would flush the small gradients the scale
      // was there to protect. The f32 tensor replaces .grad(), so clipping and step see it.
      const Tensor wide = Tensor::empty_like(g, DType::F32);
      state.found_inf |= unscale_into(g, inv, wide);
      p.autograd_meta()->grad = wide;
    } else {
      state.found_inf |= unscale_and_check_finite(g, inv);
    }
  }
  state.unscaled = true;
}

void GradScaler::agree_found_inf(const Communicator& world) {
  if (!options_.enabled) return;
  bool found_inf = false;
  for (const auto& [opt, state] : this_step_) {
    MIXPREC_CHECK(state.unscaled && !state.stepped,
                  "[GradScaler] agree_found_inf() goes after unscale() and before step()");
    found_inf |= state.found_inf;
  }
  if (!world.any(found_inf)) return;
  for (auto& [opt, state] : this_step_) state.found_inf = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& state = this_step_[&opt];
  MIXPREC_CHECK(!state.stepped,
                "[GradScaler] step() was already called on this optimizer since the last update()");
  if (!state.unscaled) unscale(opt);
  state.stepped = true;
  if (state.found_inf) return false;  // weights, master weights and optimizer state untouched
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool found_inf = false;
  for (const auto& [opt, state] : this_step_) found_inf |= state.found_inf;
  this_step_.clear();
  last_skipped_ = found_inf;
  if (found_inf) ++skipped_steps_;
  if (!options_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_left_ > 0) return;
    hysteresis_left_ = options_.hysteresis;
    const double next = scale_ * options_.backoff_factor;
    if (next < options_.min_scale) {
      MIXPREC_CHECK(options_.min_scale_policy == MinScalePolicy::Clamp,
                    "[GradScaler] the loss scale would fall to ", next, ", below min_scale ",
                    options_.min_scale,
                    ": gradients overflow at every scale, so training is diverging");
      scale_ = options_.min_scale;
    } else {
      scale_ = next;
    }
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const double next = scale_ * options_.growth_factor;
    if (next <= std::numeric_limits<float>::max()) scale_ = next;  // never grows to inf
    growth_tracker_ = 0;
    hysteresis_left_ = options_.hysteresis;  // a clean window restores the tolerance
  }
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"hysteresis_left", static_cast<double>(hysteresis_left_)},
          {"skipped_steps", static_cast<double>(skipped_steps_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  for (const char* key : {"scale", "growth_tracker", "hysteresis_left", "skipped_steps"})
    MIXPREC_CHECK(state.count(key) == 1, "[GradScaler] state is missing '", key, "'");
  MIXPREC_CHECK(state.at("scale") > 0 && std::isfinite(state.at("scale")),
                "[GradScaler] invalid scale ", state.at("scale"));
  scale_ = state.at("scale");
  growth_tracker_ = static_cast<int64_t>(state.at("growth_tracker"));
  hysteresis_left_ = static_cast<int64_t>(state.at("hysteresis_left"));
  skipped_steps_ = static_cast<int64_t>(state.at("skipped_steps"));
  this_step_.clear();
}

}  // namespace mixprec::amp
