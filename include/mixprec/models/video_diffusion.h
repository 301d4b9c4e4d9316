#pragma once
// Live-stream video diffusion on UNetVideo: the training loss and the frame-by-frame generator.
//
// Each frame is sampled by DDIM conditioned on the previous frame. Generated frames are never
// perfect, and conditioning on them feeds the errors back (drift). History augmentation is the
// remedy used here (docs/VIDEO.md): during training the context frame is corrupted with
// Gaussian noise of a random strength sigma ~ U(0, context_noise_max), so the model learns to
// produce a clean next frame from an imperfect previous one instead of copying its artefacts.
#include <cstdint>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"

namespace mixprec::models {

struct VideoLossOptions {
  Prediction prediction = Prediction::V;
  double context_noise_max = 0.1;  // history augmentation; 0 turns it off
};

// The denoising loss of one batch: prev, current [B, 3, H, W] frames in [-1, 1] (any float
// dtype). Draws timesteps, noise and the context corruption from `gen`; the network's input is
// made in `input_dtype` (the parameters' dtype for a half-precision model, f32 under autocast).
// Returns the f32 mean squared error against the eps or v target.
Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& prev,
                            const Tensor& current, const VideoLossOptions& options,
                            DType input_dtype, Generator& gen);

struct StreamOptions {
  int64_t steps = 4;  // DDIM steps per frame
  Prediction prediction = Prediction::V;
  uint64_t seed = 0;  // the noise of frame i is a pure function of (seed, i)
};

// Generates frames one at a time, each conditioned on the one before. The network runs in its
// parameters' dtype (convert the model first for true half precision); the sampler's state is
// f32. Wrap next() in an amp::Autocast guard to run an f32 model under autocast instead.
class VideoStream {
 public:
  // first_frame [1, 3, H, W] in [-1, 1]: the context of the first generated frame.
  VideoStream(UNetVideo& model, NoiseSchedule schedule, const Tensor& first_frame,
              StreamOptions options);
  Tensor next();  // the next frame, [1, 3, H, W] f32 in [-1, 1]
  int64_t frames_generated() const { return index_; }

 private:
  UNetVideo& model_;
  NoiseSchedule schedule_;
  StreamOptions options_;
  DType model_dtype_;
  Tensor context_;  // the last frame, in the model's dtype, channels_last
  int64_t index_ = 0;
};

// The dtype a module's parameters are stored in (its first floating non-norm parameter's).
DType parameter_dtype(const UNetVideo& model);

}  // namespace mixprec::models
