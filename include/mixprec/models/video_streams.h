#pragma once
// Several independent video streams generated together: one network forward per denoising step
// for all of them instead of one per stream. On a small model a forward is dominated by fixed
// costs (kernel launches, thread wake-ups, packing), so N streams in one batch cost far less
// than N times one.
#include <cstdint>
#include <memory>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/graph/graph.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_diffusion.h"

namespace mixprec::models {

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
  // A pixel whose sampled change from the last frame stays below this in every channel ([-1, 1]
  // units) keeps the last frame's value exactly (keep_still_pixels); 0 turns it off.
  double still_threshold = 0;
  // Replay each frame's sampler (every DDIM step's network forward and update) from a graph
  // captured on the first frame (graph/graph.h): the same frames bit for bit, without walking
  // the op front-ends or allocating; changed options capture again. The graph folds what
  // depends only on the weights and the timesteps, so the weights must not change under it.
  bool graph = false;
  // A restorer (`video train --restorer`: a direct model with one context frame that undoes
  // blur and grain) run on every predicted frame before it is shown and becomes context: the
  // model's next frame is always conditioned on sharp frames. Not owned; null: none.
  UNetVideo* restorer = nullptr;
  // An anchor-map model reads each frame through rigid_layers (each moving shape a sprite cut
  // once from the anchor, moved as one rigid body); false: through its map and gate as they
  // compose, pixel by pixel.
  bool rigid_maps = true;
  // An anchor-map model's network is shown, as its anchor, the newest frame of every
  // `anchor_refresh`-th frame (0: always the stream's first, real frame). The frames are still
  // read from the real anchor through the composed map; only the network's view changes. Why:
  // training shows the network anchors at most a few frames old (the rollouts are that long),
  // and a stream's anchor is as old as the stream: with a shape far from where the anchor has
  // it, the network closes its map gate over the shape, and the shape's sprite stands still.
  int64_t anchor_refresh = 0;
};

// Stream i is the stream a VideoStream would generate from first_frames[i] with seed
// options.seed + i (the same noise, the same context noise), up to the difference between a
// batched and a single forward in the network's dtype (none where the kernels compute every
// sample the same way whatever the batch).
class BatchedVideoStream {
 public:
  // first_frames: one [K, 3, H, W] per stream in [-1, 1], oldest first, K = the model's
  // context_frames, all the same size. An anchor model (Config::anchor_frame) keeps one frame
  // per stream in front of every context: anchors[i] [1, 3, H, W], or by default the stream's
  // oldest first frame (8-bit, as in training). An anchor-map model (Config::anchor_map) reads
  // every frame from its newest first frame through a map that starts there; it takes no anchors
  // (a continuing stream restarts its map at the newest recent frame).
  BatchedVideoStream(UNetVideo& model, NoiseSchedule schedule,
                     const std::vector<Tensor>& first_frames, StreamOptions options,
                     const std::vector<Tensor>& anchors = {});

  // The next frame of every stream, [N, 3, H, W] f32 in [-1, 1] (8-bit levels if quantize).
  Tensor next();

  // Steps, context noise and seed apply from the next frame on; the contexts are kept.
  void set_options(const StreamOptions& options);
  const StreamOptions& options() const { return options_; }

  int64_t streams() const { return context_.size(0); }
  // The graph the last frame replayed (options().graph), else nullptr.
  const graph::Graph* sampler_graph() const {
    return sampler_graph_ != nullptr ? sampler_graph_->last() : nullptr;
  }
  int64_t frames_generated() const { return index_; }
  // The last K frames of stream i, [K, 3, H, W] f32, oldest first: what a new stream needs to
  // continue this one (on a model converted to another precision, say).
  Tensor recent_frames(int64_t stream) const;
  // Stream i's anchor frame [1, 3, H, W] f32 (an anchor model's; undefined otherwise, and for an
  // anchor-map model): what a continuing stream passes on with recent_frames.
  Tensor anchor(int64_t stream) const;

 private:
  // An anchor-map model's frames from the network's `context` input: advances displacement_.
  Tensor next_anchor_map_frames(const Tensor& context, const Tensor& sigma);
  // What every frame ends with: still pixels kept, 8-bit quantization, the frame appended to
  // the context; returns the frame.
  Tensor finish_frame(Tensor frames);

  UNetVideo& model_;
  NoiseSchedule schedule_;
  StreamOptions options_;
  DType model_dtype_;
  Tensor context_;  // the last K frames of every stream [N, 3K, H, W], model dtype, channels_last
  Tensor anchors_;  // an anchor model's anchor of every stream [N, 3, H, W], same; else undefined
  // An anchor-map model's map of every stream [N, 2, H, W], the frames it reads shapes from (the
  // anchors, 8-bit values in f32: exactly what training reads) and the last frames shown (f32,
  // what its still pixels copy); else undefined.
  Tensor displacement_, map_source_, last_shown_;
  // options_.rigid_maps: the stream's sprites (rigid_layers) and clean plate, made once.
  Tensor sprites_, plate_;
  Tensor previous_flow_;  // Config::flow_input: the flow of the last frame (zero at first)
  int64_t index_ = 0;
  // options_.graph: the sampler of one frame, (context, sigma, noise, last) -> frames (an
  // anchor-map model's: (context, sigma, anchor, map) -> frames, map), made for the options in
  // force (set_options drops it).
  std::unique_ptr<graph::CompiledFunction> sampler_graph_;
};

// Generates frames one at a time, each conditioned on the ones before. The network runs in its
// parameters' dtype (convert the model first for true half precision); the sampler's state is
// f32. Wrap next() in an amp::Autocast guard to run an f32 model under autocast instead.
class VideoStream {
 public:
  // first_frames [K, 3, H, W] in [-1, 1], oldest first, K = the model's context_frames: the
  // context of the first generated frame.
  VideoStream(UNetVideo& model, NoiseSchedule schedule, const Tensor& first_frames,
              StreamOptions options)
      : streams_(model, std::move(schedule), {first_frames}, options) {}
  Tensor next() { return streams_.next(); }  // [1, 3, H, W] f32 in [-1, 1]
  int64_t frames_generated() const { return streams_.frames_generated(); }
  const graph::Graph* sampler_graph() const { return streams_.sampler_graph(); }

 private:
  BatchedVideoStream streams_;  // one stream
};

}  // namespace mixprec::models
