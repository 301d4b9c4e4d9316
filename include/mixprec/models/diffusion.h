#pragma once
// Gaussian diffusion for the video model: a noise schedule, the training targets, and a
// deterministic DDIM sampler (eta = 0) that takes any number of steps (1, 2, 4, 8, 25, 50, ...).
//
// Notation (DDPM/DDIM): alpha_bar(t) in (0, 1] falls from ~1 at t = 0 to ~0 at t = T-1;
//   x_t = sqrt(alpha_bar) x_0 + sqrt(1 - alpha_bar) eps
// The model predicts eps (epsilon-prediction) or v = sqrt(alpha_bar) eps - sqrt(1 - alpha_bar)
// x_0 (v-prediction: better conditioned at the noisy end, where few-step samplers start).
//
// All schedule arithmetic runs in f32 on the sampler's state whatever dtype the model runs in:
// the state is [B, 3, H, W] (a few thousand values a frame), so this costs nothing, and the
// 16-bit model only ever sees its own input and output.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::models {

// Epsilon and V are diffusion targets. Direct is no diffusion at all: the network maps its
// conditioning to the clean sample in one forward (a deterministic predictor, trained by
// regression; the noisy input is zeros and the timestep 0). For a near-deterministic target, such
// as the next frame of the moving-shapes videos given two frames, the conditional mean a
// regression learns is already sharp, and one forward costs a quarter of four DDIM steps.
// NoiseSchedule::target and ddim_sample refuse it.
enum class Prediction { Epsilon, V, Direct };
Prediction parse_prediction(const std::string& name);  // "eps" | "v" | "direct"
const char* prediction_name(Prediction p);

class NoiseSchedule {
 public:
  // Nichol & Dhariwal's cosine schedule (s = 0.008, betas clipped at 0.999).
  static NoiseSchedule cosine(int64_t steps = 1000);
  // DDPM's linear betas.
  static NoiseSchedule linear(int64_t steps = 1000, double beta_start = 1e-4,
                              double beta_end = 0.02);

  int64_t steps() const { return static_cast<int64_t>(alpha_bar_.size()); }
  double alpha_bar(int64_t t) const;  // t in [0, steps)

  // x_t for each batch item's own timestep: x0, noise [B, ...] (f32), timesteps [B] (int64).
  Tensor add_noise(const Tensor& x0, const Tensor& noise, const Tensor& timesteps) const;
  // What the model is trained to output (f32).
  Tensor target(const Tensor& x0, const Tensor& noise, const Tensor& timesteps,
                Prediction prediction) const;
  // The timesteps an n-step sampler visits, highest first, "trailing" spacing: the first is
  // always steps-1 (pure noise), so even one step starts where training's noisiest samples are.
  std::vector<int64_t> sampling_timesteps(int64_t n) const;

 private:
  explicit NoiseSchedule(std::vector<double> alpha_bar) : alpha_bar_(std::move(alpha_bar)) {}
  std::vector<double> alpha_bar_;
};

// The denoiser as the sampler calls it: (x_t in f32 [B, ...], timesteps [B] int64) -> the
// prediction (any float dtype; converted to f32).
using Denoiser = std::function<Tensor(const Tensor& x_t, const Tensor& timesteps)>;

// Deterministic DDIM (eta = 0) from x_T = `noise` over `steps` steps; returns x_0 in f32,
// clamped to [-1, 1] at each step's x_0 estimate (keeps long autoregressive streams in range).
Tensor ddim_sample(const Denoiser& model, const Tensor& noise, const NoiseSchedule& schedule,
                   int64_t steps, Prediction prediction);

}  // namespace mixprec::models
