#pragma once
// Live-stream video diffusion on UNetVideo: the training loss and the frame-by-frame generator.
//
// Each frame is sampled by DDIM conditioned on the previous frames. Generated frames are never
// perfect, and conditioning on them feeds the errors back (drift). History augmentation is the
// remedy used here (docs/VIDEO.md): during training the context frames are corrupted with
// Gaussian noise of a random strength sigma ~ U(0, context_noise_max) per sample, so the model
// learns to produce a clean next frame from imperfect previous ones instead of copying their
// artefacts; a model with Config::context_noise_level is also told sigma.
#include <cstdint>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"

namespace mixprec::models {

struct VideoLossOptions {
  Prediction prediction = Prediction::V;
  double context_noise_max = 0.1;  // history augmentation; 0 turns it off
  // Max std (pixels) of a Gaussian blur applied to the context, per sample ~ U(0, max) and not
  // told to the model: a generator's errors are soft edges more than white noise, so the model
  // learns to restore sharp shapes from a softened history instead of copying the softness.
  double context_blur_max = 0;
  // Round the clean context to 8-bit levels first (quantize_8bit), as a stream's context is.
  bool quantize_context = false;
  // Residual diffusion: the network denoises r = (frame - last) / 2, the change from the newest
  // context frame exactly as the network sees it (after quantization, blur and noise), instead
  // of the frame itself. Copying the last frame is then the zero prediction: a still background
  // costs the network nothing; and since the change also removes the context's noise, a stream
  // conditioned on a little noise cleans its own grain instead of accumulating it.
  bool residual = false;
};

// The denoising loss of one batch: context [B, 3K, H, W] (the K = Config::context_frames
// previous frames, oldest first, see context_of) and current [B, 3, H, W], frames in [-1, 1]
// (any float dtype). Draws timesteps, noise and the context corruption from `gen`; the
// network's input is made in `input_dtype` (the parameters' dtype for a half-precision model,
// f32 under autocast). Returns the f32 mean squared error against the eps or v target.
Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule,
                            const Tensor& context, const Tensor& current,
                            const VideoLossOptions& options, DType input_dtype, Generator& gen);

// Frames [B, 3, H, W] each (oldest first) -> the context [B, 3K, H, W], channels_last.
Tensor context_of(const std::vector<Tensor>& frames);

// Frames in [-1, 1] (any float dtype) -> the same values rounded to the 256 levels of an 8-bit
// image by the byte mapping of the PNG and GIF writers (io::float_to_byte), as f32
// byte / 127.5 - 1. A stream feeds back exactly what a viewer sees, and errors below half a
// level cannot accumulate.
Tensor quantize_8bit(const Tensor& frames);

// frames [B, C, H, W] -> each sample blurred by a separable Gaussian of std sigma[b] pixels
// (0: unchanged; edges replicated), f32, channels_last.
Tensor blur_frames(const Tensor& frames, const std::vector<double>& sigma);

// The next frame of every sample: DDIM over `steps` steps from `noise` [B, 3, H, W] conditioned
// on `context` [B, 3K, H, W] (and its noise std `context_sigma` [B], or undefined), the network
// run on `input_dtype` inputs. For a residual model `last` [B, 3, H, W] is the frame the sampled
// change is added to (the newest frame of `context`, noise included); undefined otherwise. No
// gradient. Returns [B, 3, H, W] f32 in [-1, 1].
Tensor sample_next_frames(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& context,
                          const Tensor& context_sigma, const Tensor& noise, int64_t steps,
                          Prediction prediction, DType input_dtype, const Tensor& last = {});

struct StreamOptions {
  int64_t steps = 4;  // DDIM steps per frame
  Prediction prediction = Prediction::V;
  uint64_t seed = 0;  // the noise of frame i is a pure function of (seed, i)
  // Noise of this std is added to the context before each frame (and a model with
  // Config::context_noise_level is told so): the level the model trusts the context at.
  double context_noise = 0;
  // Each frame is rounded to 8-bit levels before it is returned and becomes context
  // (quantize_8bit): the model conditions on exactly what a viewer sees.
  bool quantize = true;
  bool residual = false;  // the model denoises the change from the last frame (VideoLossOptions)
};

// Generates frames one at a time, each conditioned on the ones before. The network runs in its
// parameters' dtype (convert the model first for true half precision); the sampler's state is
// f32. Wrap next() in an amp::Autocast guard to run an f32 model under autocast instead.
class VideoStream {
 public:
  // first_frames [K, 3, H, W] in [-1, 1], oldest first, K = the model's context_frames: the
  // context of the first generated frame.
  VideoStream(UNetVideo& model, NoiseSchedule schedule, const Tensor& first_frames,
              StreamOptions options);
  Tensor next();  // the next frame, [1, 3, H, W] f32 in [-1, 1] (8-bit levels if quantize)
  int64_t frames_generated() const { return index_; }

 private:
  UNetVideo& model_;
  NoiseSchedule schedule_;
  StreamOptions options_;
  DType model_dtype_;
  Tensor context_;  // the last K frames [1, 3K, H, W], in the model's dtype, channels_last
  int64_t index_ = 0;
};

// The dtype a module's parameters are stored in (its first floating non-norm parameter's).
DType parameter_dtype(const UNetVideo& model);

}  // namespace mixprec::models
