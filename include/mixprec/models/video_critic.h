#pragma once
// VideoCritic: the adversary of a direct video predictor (`video train --adversarial`).
//
// A per-pixel loss cannot keep a stream alive: where the predictor is unsure where a shape will
// be, the mean (mse) or median (l1) of the likely next frames is a blurred or eroded shape, and a
// stream made of such frames fades frame by frame (docs/VIDEO.md). An adversarial term is not
// per-pixel: it asks that the frames look like frames of the data, which a blurred, eroded,
// vanished or frozen shape does not, and leaves the predictor free to choose one likely position
// instead of the average of all.
//
// The critic sees a clip: T consecutive frames channel-concatenated, [B, 3T, H, W] (the context a
// rollout started from, then the frames it made), so it judges motion as well as looks: a shape
// that shrinks, blurs or stops from one frame to the next is as visible as one that looks wrong.
// It is a PatchGAN (pix2pix): four 3x3 convolutions, three of them stride 2, with GroupNorm and
// SiLU, then a 1x1 convolution to one logit per patch [B, 1, H/8, W/8]; each logit sees a 31x31
// window, the size of the largest shapes, so it judges shapes and their outlines, not whole
// scenes. The losses are the hinge losses of SAGAN / BigGAN.
#include <cstdint>
#include <memory>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/nn/layers.h"

namespace mixprec::models {

class VideoCritic final : public nn::Module {
 public:
  // `frames` frames of `frame_channels` channels per clip, `width` channels in the first layer.
  VideoCritic(int64_t frames, int64_t frame_channels = 3, int64_t width = 32,
              Generator& gen = default_generator());
  std::string_view type_name() const override { return "VideoCritic"; }

  // clip [B, frames * frame_channels, H, W] (H, W divisible by 8), values in [-1, 1], any float
  // dtype -> one logit per patch [B, 1, H/8, W/8] in the clip's dtype (f32 under autocast).
  Tensor forward(const Tensor& clip);
  int64_t frames() const { return frames_; }

 private:
  int64_t frames_, frame_channels_;
  std::shared_ptr<nn::Sequential> net_;
};

// The critic's hinge loss: mean relu(1 - D(real)) + mean relu(1 + D(fake)), f32. `fake` is taken
// as it is: detach it first to train the critic alone.
Tensor critic_hinge_loss(VideoCritic& critic, const Tensor& real, const Tensor& fake);

// The generator's adversarial loss: -mean D(fake), f32 (the gradient flows into fake).
Tensor generator_adversarial_loss(VideoCritic& critic, const Tensor& fake);

}  // namespace mixprec::models
