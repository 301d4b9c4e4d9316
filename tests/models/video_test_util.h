#pragma once
// What the video model tests share: a UNetVideo small enough to run a stream in milliseconds.
#include <cstdint>
#include <memory>

#include "gpt_test_util.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/nn/init.h"

namespace mixprec::models::test {

// Two levels of 16 and 32 channels at 8x8 frames.
inline UNetVideoConfig tiny_unet(int64_t context_frames = 1, bool noise_level = false) {
  UNetVideoConfig c;
  c.name = "tiny";
  c.base_channels = 16;
  c.channel_mults = {1, 2};
  c.res_blocks = 1;
  c.head_dim = 32;
  c.groups = 4;
  c.context_frames = context_frames;
  c.context_noise_level = noise_level;
  return c;
}

// An anchor-map model (motion + anchor + anchor_map) of two context frames whose output layer
// is not zero: every frame is one bilinear read of the anchor through a map composed with each
// frame's flow, and the flow and gates vary.
inline std::unique_ptr<UNetVideo> anchor_map_net(Generator& gen) {
  UNetVideoConfig c = tiny_unet(2);
  c.motion = c.anchor_frame = c.anchor_map = true;
  auto net = std::make_unique<UNetVideo>(c, gen);
  nn::init::uniform_(parameter(*net, "conv_out.weight"), -0.2, 0.2, gen);
  return net;
}

}  // namespace mixprec::models::test
