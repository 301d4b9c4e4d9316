#include "mixprec/models/diffusion.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mixprec/mode/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/ops/arith.h"

namespace mixprec::models {
namespace {

// [B] timesteps -> a [B, 1, ...] f32 tensor of f(alpha_bar(t)), shaped to broadcast over `like`.
Tensor per_item(const NoiseSchedule& s, const Tensor& timesteps, const Tensor& like,
                double (*f)(double)) {
  MIXPREC_CHECK(timesteps.dim() == 1 && like.dim() >= 1 && timesteps.size(0) == like.size(0),
                "[diffusion] expected timesteps [", like.dim() >= 1 ? like.size(0) : 0, "], got ",
                shape_to_string(timesteps.shape()));
  Shape shape(static_cast<std::size_t>(like.dim()), 1);
  shape[0] = like.size(0);
  Tensor out = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < like.size(0); ++i) {
    const auto t = static_cast<int64_t>(timesteps.value({i}));
    out.data<float>()[i] = static_cast<float>(f(s.alpha_bar(t)));
  }
  return out;
}

double sqrt_ab(double ab) { return std::sqrt(ab); }
double sqrt_one_minus_ab(double ab) { return std::sqrt(1.0 - ab); }

Tensor f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

Prediction parse_prediction(const std::string& name) {
  if (name == "eps" || name == "epsilon") return Prediction::Epsilon;
  if (name == "v") return Prediction::V;
  if (name == "direct") return Prediction::Direct;
  throw Error("[diffusion] unknown prediction '" + name + "', expected eps|v|direct");
}

const char* prediction_name(Prediction p) {
  static constexpr const char* kNames[] = {"eps", "v", "direct"};
  return kNames[static_cast<int>(p)];
}

NoiseSchedule NoiseSchedule::cosine(int64_t steps) {
  MIXPREC_CHECK(steps >= 2, "[NoiseSchedule] needs at least 2 steps, got ", steps);
  constexpr double s = 0.008;
  auto f = [&](double t) {
    const double angle = (t / static_cast<double>(steps) + s) / (1.0 + s) * std::numbers::pi / 2;
    return std::cos(angle) * std::cos(angle);
  };
  std::vector<double> alpha_bar;
  double product = 1.0;
  for (int64_t t = 0; t < steps; ++t) {
    const double beta =
        std::min(1.0 - f(static_cast<double>(t + 1)) / f(static_cast<double>(t)), 0.999);
    product *= 1.0 - beta;
    alpha_bar.push_back(product);
  }
  return NoiseSchedule(std::move(alpha_bar));
}

NoiseSchedule NoiseSchedule::linear(int64_t steps, double beta_start, double beta_end) {
  MIXPREC_CHECK(steps >= 2 && beta_start > 0 && beta_end < 1 && beta_start <= beta_end,
                "[NoiseSchedule] invalid linear schedule");
  std::vector<double> alpha_bar;
  double product = 1.0;
  for (int64_t t = 0; t < steps; ++t) {
    const double beta = beta_start + (beta_end - beta_start) * static_cast<double>(t) /
                                         static_cast<double>(steps - 1);
    product *= 1.0 - beta;
    alpha_bar.push_back(product);
  }
  return NoiseSchedule(std::move(alpha_bar));
}

double NoiseSchedule::alpha_bar(int64_t t) const {
  MIXPREC_CHECK(t >= 0 && t < steps(), "[NoiseSchedule] timestep ", t, " outside [0, ", steps(),
                ")");
  return alpha_bar_[static_cast<std::size_t>(t)];
}

Tensor NoiseSchedule::add_noise(const Tensor& x0, const Tensor& noise,
                                const Tensor& timesteps) const {
  NoGrad no_grad;
  return add(mul(f32(x0), per_item(*this, timesteps, x0, sqrt_ab)),
             mul(f32(noise), per_item(*this, timesteps, x0, sqrt_one_minus_ab)));
}

Tensor NoiseSchedule::target(const Tensor& x0, const Tensor& noise, const Tensor& timesteps,
                             Prediction prediction) const {
  NoGrad no_grad;
  MIXPREC_CHECK(prediction != Prediction::Direct,
                "[diffusion] a direct predictor has no diffusion target");
  if (prediction == Prediction::Epsilon) return f32(noise).clone();
  return sub(mul(f32(noise), per_item(*this, timesteps, x0, sqrt_ab)),
             mul(f32(x0), per_item(*this, timesteps, x0, sqrt_one_minus_ab)));
}

std::vector<int64_t> NoiseSchedule::sampling_timesteps(int64_t n) const {
  MIXPREC_CHECK(n >= 1 && n <= steps(), "[ddim] the number of sampling steps must be in [1, ",
                steps(), "], got ", n);
  std::vector<int64_t> out;
  for (int64_t i = n; i >= 1; --i) out.push_back(i * steps() / n - 1);
  return out;
}

Tensor ddim_sample(const Denoiser& model, const Tensor& noise, const NoiseSchedule& schedule,
                   int64_t steps, Prediction prediction) {
  NoGrad no_grad;
  MIXPREC_CHECK(prediction != Prediction::Direct,
                "[ddim] a direct predictor is not sampled: it is one forward");
  const std::vector<int64_t> ts = schedule.sampling_timesteps(steps);
  const int64_t batch = noise.size(0);
  Tensor x = f32(noise).clone();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const int64_t t = ts[i];
    const Tensor t_batch = Tensor::full({batch}, static_cast<double>(t), DType::I64);
    const Tensor out = f32(model(x, t_batch));
    const double ab = schedule.alpha_bar(t), a = std::sqrt(ab), s = std::sqrt(1.0 - ab);
    Tensor x0 = prediction == Prediction::V ? sub(mul(x, a), mul(out, s))
                                            : mul(sub(x, mul(out, s)), 1.0 / a);
    x0 = clamp(x0, -1.0, 1.0);
    if (i + 1 == ts.size()) return x0;
    // Re-derive the noise from the clamped x_0 so the step stays on a consistent trajectory.
    const double ab_next = schedule.alpha_bar(ts[i + 1]);
    const Tensor eps = mul(sub(x, mul(x0, a)), 1.0 / s);
    x = add(mul(x0, std::sqrt(ab_next)), mul(eps, std::sqrt(1.0 - ab_next)));
  }
  return x;
}

}  // namespace mixprec::models
