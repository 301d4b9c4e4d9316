#pragma once
// What the video model tests share: a UNetVideo small enough to run a stream in milliseconds.
#include <cstdint>

#include "mixprec/models/unet_video.h"

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

}  // namespace mixprec::models::test
