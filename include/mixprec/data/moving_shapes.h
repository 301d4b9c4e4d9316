#pragma once
// MovingShapes: an endless procedural video dataset for the video diffusion model (issue #6).
//
// Video v of a dataset with seed s is a ShapeScene (shape_scene.h) drawn from a Philox
// generator keyed by a hash of (s, v): min_shapes to max_shapes (default 1 to 3) coloured
// circles, rectangles (some square) and equilateral triangles that move, spin, bounce off the
// borders and occlude each other in a fixed depth order, over a smooth two-colour gradient with a
// low-frequency stripe or check pattern. Frame t is a pure function of (s, v, t), identical on
// every machine (see shape_scene.h for why), and costs the same for any t, so a training batch can
// pick frames at random and an evaluation can compare 600+ generated frames against the ground
// truth.
//
// Frames are RGB in [-1, 1], the diffusion model's range. Sizes and speeds scale with the
// smaller frame side S: at 64x64 shapes span about 10 to 30 pixels, move 0.4 to 1.3 pixels
// per frame and turn 0.6 to 3.4 degrees per frame, so consecutive frames are close but
// differ (a video with no shapes, possible only with min_shapes = 0, is a still image).
//
// Speed: about 20,000 frames/s per core at 64x64 with up to 4 shapes, measured on a busy
// shared VM (bench/bench_data prints the figure; docs/PERFORMANCE.md records it).
//
//   data::MovingShapes ds({.height = 64, .width = 64}, /*seed=*/1);
//   Generator gen(7);
//   auto [prev, cur] = ds.batch(32, gen, DType::BF16);  // [32, 3, 64, 64] channels_last
//   Tensor truth = ds.clip(/*video=*/123456789, /*start=*/0, /*frames=*/600);  // [600, 3, 64, 64]
#include <cstdint>
#include <utility>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/data/shape_scene.h"

namespace mixprec::data {

struct MovingShapesConfig {
  int64_t height = 64, width = 64;     // each in [8, 16384]
  int min_shapes = 1, max_shapes = 3;  // 0 <= min_shapes <= max_shapes <= 8
  // batch() draws videos from [0, num_videos) and frames t from [1, frames_per_video), so
  // videos >= num_videos are held out for evaluation. frame() and clip() take any video >= 0
  // and any t >= 0.
  int64_t num_videos = 1 << 20;
  int64_t frames_per_video = 1000;  // >= 2
  // The i-th (>= 0) held-out video: never drawn by batch() or windows(), so evaluations and the
  // first frames of streams start from scenes the model was not trained on.
  int64_t held_out(int64_t i) const { return num_videos + i; }
};

// The true anchor maps of a batch (scene_anchor_map), f32, channels_last: offsets [B, 2, H, W],
// valid [B, 1, H, W] (1 where the offset is defined), layer [B, 1, H, W] (1 shape, 0
// background, -1 outline) and motion [B, 2, H, W] (the offset of the pixel's shape's centre
// where its offset is defined, else 0; may be undefined where a caller made the maps itself).
struct AnchorMaps {
  Tensor offsets, valid, layer, motion;
};

// Where a training window came from: its video and the time of its first frame.
struct WindowOrigin {
  int64_t video = 0;
  int64_t first = 0;
};

// Windows drawn around bounces: a shape's motion turning back at a wall. Uniform draws see one
// rarely (a shape crosses the frame in about 60 frames), and a model that has seen too few keeps
// a shape going into the wall when its own frames are its context.
struct BounceDraws {
  double fraction = 0;  // each pair is drawn this way with this probability (0: never, no draw)
  // ... so that a bounce (frame b, whose motion from b - 1 turns back from the one into b - 1 in
  // x or y) is one of the window's last `within` frames (its targets, for a rollout).
  int64_t within = 1;
};

class MovingShapes {
 public:
  // Throws mixprec::Error for an invalid config.
  MovingShapes(MovingShapesConfig config, uint64_t seed);

  const MovingShapesConfig& config() const { return config_; }
  uint64_t seed() const { return seed_; }

  // The scene behind video `video` (>= 0): what frame() renders.
  ShapeScene scene(int64_t video) const;

  // Frame t (>= 0) of video `video` (>= 0): [3, H, W] f32 in [-1, 1], contiguous.
  Tensor frame(int64_t video, int64_t t) const;

  // A training batch: for each of `batch` (>= 1) pairs (video, t) drawn from `gen` (two words
  // each, in order), the previous frame t - 1 and the current frame t. Both are
  // [batch, 3, H, W] in `dtype` (f32, f16, bf16 or f64; 16-bit values rounded to nearest even
  // from the f32 render) and `format` (Contiguous or ChannelsLast). Frames render in parallel;
  // the result depends only on the seed and gen's state, never on the thread count.
  std::pair<Tensor, Tensor> batch(int64_t batch, Generator& gen, DType dtype = DType::F32,
                                  MemoryFormat format = MemoryFormat::ChannelsLast) const;

  // The general form: for each of `batch` pairs (video, t), t drawn from
  // [length - 1, frames_per_video), the `length` (2 <= length <= frames_per_video) consecutive
  // frames t - length + 1, ..., t; result[i] holds frame t - length + 1 + i of every pair.
  // batch(b, gen) is windows(b, 2, gen): the same draws, the same frames.
  // `origins`, if given, receives where each window came from.
  // With `bounces`, a pair drawn around a bounce takes its t so that one of its video's bounces
  // is one of the window's last bounces.within frames (b uniform among them, then t - b
  // uniform in [0, within), clamped to the video); a video without one keeps the uniform t.
  std::vector<Tensor> windows(int64_t batch, int64_t length, Generator& gen,
                              DType dtype = DType::F32,
                              MemoryFormat format = MemoryFormat::ChannelsLast,
                              std::vector<WindowOrigin>* origins = nullptr,
                              const BounceDraws& bounces = {}) const;

  // The frames b in [first, frames_per_video) at which a shape of `video` bounces (see
  // BounceDraws), in order.
  std::vector<int64_t> bounce_frames(int64_t video, int64_t first) const;

  // The true anchor maps (shape_scene.h, scene_anchor_map) of frame `offset` of each window
  // with respect to its frame `anchor_offset` (offsets from the window's first frame, >= 0):
  // What an anchor-map model's map and gates should be, where they are defined.
  AnchorMaps anchor_maps(const std::vector<WindowOrigin>& origins, int64_t anchor_offset,
                         int64_t offset) const;

  // windows() with one more frame per pair in front: frame u of the same video, u drawn from
  // [0, frames_per_video) after all of windows()'s draws (one word per pair, in order), so the
  // windows are exactly windows()'s. The anchor of an anchor model's training sample: a real frame
  // of the scene at any distance, as a stream's first frame is after any number of frames.
  // Returns length + 1 tensors: the anchor frames, then the window.
  std::vector<Tensor> anchored_windows(int64_t batch, int64_t length, Generator& gen,
                                       DType dtype = DType::F32,
                                       MemoryFormat format = MemoryFormat::ChannelsLast) const;

  // `frames` (>= 1) consecutive frames start, start + 1, ... of one video: [frames, 3, H, W]
  // f32, contiguous. The ground truth for drift evaluation.
  Tensor clip(int64_t video, int64_t start, int64_t frames) const;

 private:
  std::vector<Tensor> draw_windows(int64_t batch, int64_t length, Generator& gen, DType dtype,
                                   MemoryFormat format, bool anchored,
                                   std::vector<WindowOrigin>* origins,
                                   const BounceDraws& bounces = {}) const;

  MovingShapesConfig config_;
  uint64_t seed_;
};

}  // namespace mixprec::data
