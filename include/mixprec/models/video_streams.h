#pragma once
// Several independent video streams generated together: one network forward per denoising step
// for all of them instead of one per stream. On a small model a forward is dominated by fixed
// costs (kernel launches, thread wake-ups, packing), so N streams in one batch cost far less
// than N times one.
#include <cstdint>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_diffusion.h"

namespace mixprec::models {

// Stream i is the stream a VideoStream would generate from first_frames[i] with seed
// options.seed + i (the same noise, the same context noise), up to the difference between a
// batched and a single forward in the network's dtype (none where the kernels compute every
// sample the same way whatever the batch).
class BatchedVideoStream {
 public:
  // first_frames: one [K, 3, H, W] per stream in [-1, 1], oldest first, K = the model's
  // context_frames, all the same size.
  BatchedVideoStream(UNetVideo& model, NoiseSchedule schedule,
                     const std::vector<Tensor>& first_frames, StreamOptions options);

  // The next frame of every stream, [N, 3, H, W] f32 in [-1, 1] (8-bit levels if quantize).
  Tensor next();

  // Steps, context noise and seed apply from the next frame on; the contexts are kept.
  void set_options(const StreamOptions& options);
  const StreamOptions& options() const { return options_; }

  int64_t streams() const { return context_.size(0); }
  int64_t frames_generated() const { return index_; }
  // The last K frames of stream i, [K, 3, H, W] f32, oldest first: what a new stream needs to
  // continue this one (on a model converted to another precision, say).
  Tensor recent_frames(int64_t stream) const;

 private:
  UNetVideo& model_;
  NoiseSchedule schedule_;
  StreamOptions options_;
  DType model_dtype_;
  Tensor context_;  // the last K frames of every stream [N, 3K, H, W], model dtype, channels_last
  int64_t index_ = 0;
};

}  // namespace mixprec::models
