#pragma once
// The pieces of `mixprec video train` beside its loop: the model's own predictions as context
// (--self-context), the critic of --adversarial, and the weights' moving average (--ema) saved
// beside the checkpoint.
#include <cstdint>
#include <string>
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_critic.h"
#include "mixprec/nn/module.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/ema.h"

namespace mixprec::app {

// Training on the model's own outputs (DIAMOND-style unrolling, one frame deep): for the first
// `own` samples of the batch the newest context frame is replaced by the model's prediction of
// it, sampled (no gradient, `steps` DDIM steps, 8-bit as a stream would) from the frames before
// it in `window` ([K + 2] frames per sample). The target stays the true next frame, so the
// model learns to correct its own errors instead of building on them. Returns the context.
Tensor with_own_prediction(models::UNetVideo& model, const models::NoiseSchedule& schedule,
                           const std::vector<Tensor>& window, int64_t own, int64_t steps,
                           models::Prediction prediction, bool residual, DType input_dtype,
                           Generator& gen, const Tensor& true_context);

// A module's parameters after converting it to the run's precision: what its optimizer takes.
std::vector<Tensor> parameters_in(nn::Module& module, const amp::PrecisionConfig& pc);

// The adversary of --adversarial: the critic with its own Adam (beta1 0.5, as GANs use) and
// scaler.
struct Adversary {
  models::VideoCritic critic;
  optim::Adam opt;
  amp::GradScaler scaler;
  Adversary(int64_t frames, int64_t width, double lr, const amp::PrecisionConfig& pc,
            Generator& init)
      : critic(frames, 3, width, init),
        opt(parameters_in(critic, pc), {.lr = lr, .beta1 = 0.5}),
        scaler(pc.scaler_options()) {}
};

// One step of the critic on true and generated clips [B, 3T, H, W] (the generated detached):
// its hinge loss, backward, Adam. Returns the loss. The predictor's backward also leaves
// gradients in the critic, so they are cleared first.
double train_critic(Adversary& a, const Tensor& real, const Tensor& fake);

// The critic of a resumed adversarial run, which must be from the same step as its checkpoint.
void load_critic(const std::string& path, int64_t step, Adversary& a);

// The weights' moving average of --ema beside the checkpoint, named as the model's parameters,
// with the step it is from: a resumed run needs the average of the same step as its checkpoint.
void save_average(const std::string& path, int64_t step, const nn::Module& model,
                  const optim::WeightAverage& average);
void load_average(const std::string& path, int64_t step, const nn::Module& model,
                  optim::WeightAverage& average);

}  // namespace mixprec::app
