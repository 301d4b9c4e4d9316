#include "mixprec/data/moving_shapes.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::data {
namespace {

constexpr double kTwoPi = 6.28318530717958647693;
constexpr int kMaxShapesPerVideo = 8;
constexpr int64_t kMinExtent = 8, kMaxExtent = 16384;
// Frames past this would lose integer precision in the double time axis of the motion model.
constexpr int64_t kMaxFrame = int64_t{1} << 50;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, n) from one random 64-bit word (multiply-shift: no modulo, bias <
// n / 2^64).
int64_t below(uint64_t word, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(word) * static_cast<uint64_t>(n)) >>
                              64);
}

int64_t draw_below(Generator& gen, int64_t n) { return below(gen.next_u64(), n); }

// The scene's random draws, all from one generator in a fixed order.
struct Draw {
  Generator gen;
  double u() { return gen.uniform_double(); }
  double range(double lo, double hi) { return lo + (hi - lo) * u(); }
  float rangef(double lo, double hi) { return static_cast<float>(range(lo, hi)); }
};

// HSV (all in [0, 1], hue wrapping) to RGB, piecewise linear: no trigonometry, exact and cheap.
std::array<float, 3> hsv(double hue, double sat, double val) {
  hue -= std::floor(hue);
  const double h6 = hue * 6;
  const int sector = std::clamp(static_cast<int>(h6), 0, 5);
  const double f = h6 - sector;
  const double p = val * (1 - sat), q = val * (1 - sat * f), t = val * (1 - sat * (1 - f));
  // Which of (val, p, q, t) each sector puts in red, green and blue.
  static constexpr int kSectorRgb[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                           {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
  const double values[4] = {val, p, q, t};
  const int* rgb = kSectorRgb[sector];
  const double r = values[rgb[0]], g = values[rgb[1]], b = values[rgb[2]];
  auto unit = [](double v) { return static_cast<float>(std::clamp(v, 0.0, 1.0)); };
  return {unit(r), unit(g), unit(b)};
}

void check_frame_index(const char* op, int64_t video, int64_t t) {
  MIXPREC_CHECK(video >= 0, "[", op, "] video index must be >= 0, got ", video);
  MIXPREC_CHECK(t >= 0 && t <= kMaxFrame, "[", op, "] frame index must be in [0, 2^50], got ", t);
}

}  // namespace

MovingShapes::MovingShapes(MovingShapesConfig config, uint64_t seed)
    : config_(config), seed_(seed) {
  const auto& c = config_;
  MIXPREC_CHECK(c.height >= kMinExtent && c.height <= kMaxExtent && c.width >= kMinExtent &&
                    c.width <= kMaxExtent,
                "[MovingShapes] height and width must be in [", kMinExtent, ", ", kMaxExtent,
                "], got ", c.height, "x", c.width);
  MIXPREC_CHECK(
      c.min_shapes >= 0 && c.min_shapes <= c.max_shapes && c.max_shapes <= kMaxShapesPerVideo,
      "[MovingShapes] expected 0 <= min_shapes <= max_shapes <= ", kMaxShapesPerVideo,
      ", got min_shapes ", c.min_shapes, ", max_shapes ", c.max_shapes);
  MIXPREC_CHECK(c.num_videos >= 1, "[MovingShapes] num_videos must be >= 1, got ", c.num_videos);
  MIXPREC_CHECK(c.frames_per_video >= 2 && c.frames_per_video <= kMaxFrame,
                "[MovingShapes] frames_per_video must be in [2, 2^50] (a batch pairs frame t - 1 "
                "with t), got ",
                c.frames_per_video);
}

ShapeScene MovingShapes::scene(int64_t video) const {
  MIXPREC_CHECK(video >= 0, "[MovingShapes::scene] video index must be >= 0, got ", video);
  // One generator per video, keyed by a hash of (seed, video): videos are independent of
  // each other and of the order they are asked for.
  Draw d{Generator(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(video)))};
  ShapeScene scene;
  scene.height = config_.height;
  scene.width = config_.width;
  const double side = static_cast<double>(std::min(config_.height, config_.width));

  // Muted backgrounds, so the saturated shapes stand out.
  Background& bg = scene.background;
  // Every draw is its own statement: the order of evaluation of function arguments and of
  // the operands of * is unspecified (GCC and Clang differ), and it must not decide the scene.
  const double hue0 = d.u();
  const double sat0 = d.range(0.1, 0.45);
  const double val0 = d.range(0.2, 0.7);
  const double hue1 = hue0 + d.range(-0.3, 0.3);
  const double sat1 = d.range(0.1, 0.45);
  const double val1 = d.range(0.3, 0.8);
  bg.color0 = hsv(hue0, sat0, val0);
  bg.color1 = hsv(hue1, sat1, val1);
  bg.gradient_angle = d.range(0, kTwoPi);
  const double pattern = d.u();
  bg.pattern = pattern < 0.2   ? PatternKind::None
               : pattern < 0.6 ? PatternKind::Stripes
                               : PatternKind::Checks;
  bg.pattern_period = side * d.range(0.2, 0.5);
  bg.pattern_angle = d.range(0, kTwoPi);
  bg.pattern_amplitude = d.rangef(0.06, 0.18);

  const int count = config_.min_shapes + static_cast<int>(draw_below(
                                             d.gen, config_.max_shapes - config_.min_shapes + 1));
  for (int i = 0; i < count; ++i) {
    ShapeSpec s;
    s.kind = static_cast<ShapeKind>(draw_below(d.gen, kNumShapeKinds));
    switch (s.kind) {
      case ShapeKind::Circle:
        s.size = side * d.range(0.08, 0.18);
        break;
      case ShapeKind::Rectangle:
        s.size = side * d.range(0.07, 0.15);
        s.aspect = d.u() < 0.3 ? 1.0 : d.range(0.5, 1.6);
        break;
      case ShapeKind::Triangle:
        s.size = side * d.range(0.1, 0.2);
        break;
    }
    s.x = d.range(0, static_cast<double>(config_.width));
    s.y = d.range(0, static_cast<double>(config_.height));
    const double speed = side * d.range(0.006, 0.02), heading = d.range(0, kTwoPi);
    s.vx = speed * det_cos(heading);
    s.vy = speed * det_sin(heading);
    s.angle = d.range(0, kTwoPi);
    const double spin_sign = d.u() < 0.5 ? -1 : 1;
    s.spin = spin_sign * d.range(0.01, 0.06);
    const double hue = d.u();
    const double sat = d.range(0.6, 1.0);
    const double val = d.range(0.65, 1.0);
    s.color = hsv(hue, sat, val);
    s.shading = d.rangef(0.1, 0.3);
    scene.shapes.push_back(s);
  }
  return scene;
}

Tensor MovingShapes::frame(int64_t video, int64_t t) const {
  check_frame_index("MovingShapes::frame", video, t);
  return render_scene(scene(video), t);
}

Tensor MovingShapes::clip(int64_t video, int64_t start, int64_t frames) const {
  check_frame_index("MovingShapes::clip", video, start);
  MIXPREC_CHECK(frames >= 1 && frames <= kMaxFrame - start,
                "[MovingShapes::clip] frames must be >= 1 and start + frames <= 2^50, got start ",
                start, ", frames ", frames);
  const ShapeScene s = scene(video);
  const int64_t h = config_.height, w = config_.width;
  Tensor hwc = Tensor::empty({frames, h, w, 3});  // (T, H, W, C)
  float* out = hwc.data<float>();
  parallel_for(0, frames, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) render_scene_hwc(s, start + i, out + i * h * w * 3);
  });
  return hwc.permute({0, 3, 1, 2}).contiguous();
}

std::pair<Tensor, Tensor> MovingShapes::batch(int64_t batch, Generator& gen, DType dtype,
                                              MemoryFormat format) const {
  std::vector<Tensor> frames = windows(batch, 2, gen, dtype, format);
  return {std::move(frames[0]), std::move(frames[1])};
}

std::vector<Tensor> MovingShapes::windows(int64_t batch, int64_t length, Generator& gen,
                                          DType dtype, MemoryFormat format,
                                          std::vector<WindowOrigin>* origins,
                                          const BounceDraws& bounces) const {
  return draw_windows(batch, length, gen, dtype, format, false, origins, bounces);
}

std::vector<int64_t> MovingShapes::bounce_frames(int64_t video, int64_t first) const {
  const ShapeScene s = scene(video);
  std::vector<std::vector<std::array<double, 2>>> tracks;
  for (const ShapeSpec& shape : s.shapes)
    tracks.push_back(shape_track(shape, config_.height, config_.width, config_.frames_per_video));
  std::vector<int64_t> frames;
  for (int64_t b = std::max<int64_t>(first, 2); b < config_.frames_per_video; ++b) {
    bool turns = false;
    for (const auto& track : tracks) {
      const auto &p0 = track[b - 2], &p1 = track[b - 1], &p2 = track[b];
      for (int axis = 0; axis < 2; ++axis)
        turns = turns || (p1[axis] - p0[axis]) * (p2[axis] - p1[axis]) < 0;
    }
    if (turns) frames.push_back(b);
  }
  return frames;
}

AnchorMaps MovingShapes::anchor_maps(const std::vector<WindowOrigin>& origins,
                                     int64_t anchor_offset, int64_t offset) const {
  MIXPREC_CHECK(!origins.empty() && anchor_offset >= 0 && offset >= 0,
                "[MovingShapes::anchor_maps] expected windows and offsets >= 0, got ",
                origins.size(), " windows, offsets ", anchor_offset, " and ", offset);
  const auto batch = static_cast<int64_t>(origins.size());
  const int64_t h = config_.height, w = config_.width;
  Tensor offsets = Tensor::empty({batch, 2, h, w}), valid = Tensor::empty({batch, 1, h, w}),
         layer = Tensor::empty({batch, 1, h, w}), motion = Tensor::empty({batch, 2, h, w});
  for (const WindowOrigin& o : origins)
    check_frame_index("MovingShapes::anchor_maps", o.video,
                      o.first + std::max(anchor_offset, offset));
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const WindowOrigin& o = origins[static_cast<std::size_t>(b)];
      scene_anchor_map(scene(o.video), o.first + anchor_offset, o.first + offset,
                       offsets.data<float>() + b * 2 * h * w, valid.data<float>() + b * h * w,
                       layer.data<float>() + b * h * w, motion.data<float>() + b * 2 * h * w);
    }
  });
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  return {offsets.contiguous(cl), valid.contiguous(cl), layer.contiguous(cl),
          motion.contiguous(cl)};
}

std::vector<Tensor> MovingShapes::anchored_windows(int64_t batch, int64_t length, Generator& gen,
                                                   DType dtype, MemoryFormat format) const {
  return draw_windows(batch, length, gen, dtype, format, true, nullptr);
}

std::vector<Tensor> MovingShapes::draw_windows(int64_t batch, int64_t length, Generator& gen,
                                               DType dtype, MemoryFormat format, bool anchored,
                                               std::vector<WindowOrigin>* origins,
                                               const BounceDraws& bounces) const {
  MIXPREC_CHECK(batch >= 1, "[MovingShapes::windows] batch must be >= 1, got ", batch);
  MIXPREC_CHECK(length >= 2 && length <= config_.frames_per_video,
                "[MovingShapes::windows] length must be in [2, frames_per_video = ",
                config_.frames_per_video, "], got ", length);
  MIXPREC_CHECK(is_floating(dtype),
                "[MovingShapes::windows] dtype must be floating (f32, f16, bf16 or f64), got ",
                dtype_name(dtype));
  MIXPREC_CHECK(format == MemoryFormat::Contiguous || format == MemoryFormat::ChannelsLast,
                "[MovingShapes::windows] format must be contiguous or channels_last, got ",
                memory_format_name(format));
  MIXPREC_CHECK(bounces.fraction >= 0 && bounces.fraction <= 1 && bounces.within >= 1 &&
                    bounces.within <= length,
                "[MovingShapes::windows] a bounce fraction in [0, 1] and bounces within 1 to ",
                length, " frames, got ", bounces.fraction, " and ", bounces.within);
  // All draws first, in order, so the result does not depend on how the rendering is split.
  std::vector<std::pair<int64_t, int64_t>> picks(static_cast<std::size_t>(batch));
  for (auto& [video, t] : picks) {
    video = draw_below(gen, config_.num_videos);
    t = (length - 1) + draw_below(gen, config_.frames_per_video - (length - 1));
    if (bounces.fraction == 0) continue;  // no more draws: the windows of no bounce draws
    const uint64_t coin = gen.next_u64(), which = gen.next_u64(), offset = gen.next_u64();
    if (random_detail::u64_to_unit_double(coin) >= bounces.fraction) continue;
    const std::vector<int64_t> at = bounce_frames(video, length - bounces.within);
    if (at.empty()) continue;
    const int64_t b = at[static_cast<std::size_t>(below(which, static_cast<int64_t>(at.size())))];
    t = std::clamp(b + below(offset, bounces.within), length - 1, config_.frames_per_video - 1);
  }
  if (origins != nullptr) {
    origins->clear();
    for (const auto& [video, t] : picks) origins->push_back({video, t - length + 1});
  }
  // times[b]: the frame times of pair b, oldest first, the anchor's in front.
  std::vector<std::vector<int64_t>> times(static_cast<std::size_t>(batch));
  for (std::size_t b = 0; b < picks.size(); ++b) {
    if (anchored) times[b].push_back(draw_below(gen, config_.frames_per_video));
    for (int64_t i = 0; i < length; ++i) times[b].push_back(picks[b].second - length + 1 + i);
  }
  const auto frame_count = static_cast<int64_t>(times[0].size());
  const int64_t h = config_.height, w = config_.width;
  // channels_last f32 is NHWC in memory: the renderer writes straight into it.
  std::vector<Tensor> frames;
  std::vector<float*> data;
  for (int64_t i = 0; i < frame_count; ++i) {
    frames.push_back(Tensor::empty({batch, 3, h, w}, DType::F32, MemoryFormat::ChannelsLast));
    data.push_back(frames.back().data<float>());
  }
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const auto u = static_cast<std::size_t>(b);
      const ShapeScene s = scene(picks[u].first);
      for (std::size_t i = 0; i < times[u].size(); ++i)
        render_scene_hwc(s, times[u][i], data[i] + b * h * w * 3);
    }
  });
  for (Tensor& f : frames) f = f.contiguous(format).to(dtype);
  return frames;
}

}  // namespace mixprec::data
