#include "mixprec/models/video_diffusion.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "mixprec/mode/grad_mode.h"
#include "mixprec/core/capture.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/image.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/reduce.h"

namespace mixprec::models {

DType parameter_dtype(const UNetVideo& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (name.find("norm") == std::string::npos && is_floating(p.dtype())) return p.dtype();
  return DType::F32;
}

Tensor context_of(const std::vector<Tensor>& frames) {
  MIXPREC_CHECK(!frames.empty(), "[context_of] no frames");
  std::vector<Tensor> cl;
  for (const Tensor& f : frames) cl.push_back(f.contiguous(MemoryFormat::ChannelsLast));
  return cl.size() == 1 ? cl[0] : cat(cl, 1).contiguous(MemoryFormat::ChannelsLast);
}

Tensor quantize_8bit(const Tensor& frames) {
  const Tensor in = frames.to(DType::F32).contiguous();
  Tensor out = Tensor::empty(in.shape(), DType::F32);
  capture::launch("quantize_8bit", {&in}, {&out}, [](const capture::KernelArgs& k) {
    const float* x = k.in(0).data<float>();
    float* v = k.out(0).data<float>();
    for (int64_t i = 0; i < k.out(0).numel(); ++i)
      v[i] = static_cast<float>(io::float_to_byte(x[i])) / 127.5f - 1.0f;
  });
  return out;
}

namespace {

// Normalised Gaussian taps for std sigma > 0, radius ceil(3 sigma).
std::vector<float> gaussian_taps(double sigma) {
  const auto radius = static_cast<int64_t>(std::ceil(3 * sigma));
  std::vector<float> taps(static_cast<std::size_t>(2 * radius + 1));
  double total = 0;
  for (int64_t i = -radius; i <= radius; ++i)
    total += taps[static_cast<std::size_t>(i + radius)] =
        static_cast<float>(std::exp(-0.5 * static_cast<double>(i * i) / (sigma * sigma)));
  for (float& t : taps) t = static_cast<float>(t / total);
  return taps;
}

// One plane [H, W] blurred along rows then columns, edges replicated.
void blur_plane(float* plane, int64_t h, int64_t w, const std::vector<float>& taps,
                std::vector<float>& scratch) {
  const auto radius = static_cast<int64_t>(taps.size() / 2);
  scratch.resize(static_cast<std::size_t>(h * w));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      float acc = 0;
      for (int64_t k = -radius; k <= radius; ++k)
        acc += taps[static_cast<std::size_t>(k + radius)] *
               plane[y * w + std::clamp<int64_t>(x + k, 0, w - 1)];
      scratch[static_cast<std::size_t>(y * w + x)] = acc;
    }
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      float acc = 0;
      for (int64_t k = -radius; k <= radius; ++k)
        acc += taps[static_cast<std::size_t>(k + radius)] *
               scratch[static_cast<std::size_t>(std::clamp<int64_t>(y + k, 0, h - 1) * w + x)];
      plane[y * w + x] = acc;
    }
}

}  // namespace

Tensor blur_frames(const Tensor& frames, const std::vector<double>& sigma) {
  MIXPREC_CHECK(frames.dim() == 4 && static_cast<int64_t>(sigma.size()) == frames.size(0),
                "[blur_frames] expected frames [B, C, H, W] and B sigmas, got ",
                shape_to_string(frames.shape()), " and ", sigma.size());
  Tensor out = frames.to(DType::F32).contiguous().clone();
  const int64_t c = out.size(1), h = out.size(2), w = out.size(3);
  std::vector<float> scratch;
  for (int64_t b = 0; b < out.size(0); ++b) {
    const double s = sigma[static_cast<std::size_t>(b)];
    MIXPREC_CHECK(s >= 0 && std::isfinite(s), "[blur_frames] invalid sigma ", s);
    if (s == 0) continue;
    const std::vector<float> taps = gaussian_taps(s);
    for (int64_t ch = 0; ch < c; ++ch)
      blur_plane(out.data<float>() + (b * c + ch) * h * w, h, w, taps, scratch);
  }
  return out.contiguous(MemoryFormat::ChannelsLast);
}

Tensor keep_still_pixels(const Tensor& frame, const Tensor& last, double threshold) {
  MIXPREC_CHECK(frame.dim() == 4 && last.shape() == frame.shape(),
                "[keep_still_pixels] expected frame and last [B, C, H, W], got ",
                shape_to_string(frame.shape()), " and ", shape_to_string(last.shape()));
  Tensor out = frame.to(DType::F32).contiguous().clone();
  const Tensor ref = last.to(DType::F32).contiguous();
  const int64_t c = out.size(1), hw = out.size(2) * out.size(3);
  for (int64_t b = 0; b < out.size(0); ++b) {
    float* o = out.data<float>() + b * c * hw;
    const float* l = ref.data<float>() + b * c * hw;
    for (int64_t p = 0; p < hw; ++p) {
      bool still = true;
      for (int64_t ch = 0; ch < c && still; ++ch)
        still = std::abs(o[ch * hw + p] - l[ch * hw + p]) < threshold;
      if (still)
        for (int64_t ch = 0; ch < c; ++ch) o[ch * hw + p] = l[ch * hw + p];
    }
  }
  return out;
}

Tensor degrade_context(const Tensor& context, const VideoLossOptions& options, Generator& gen) {
  Tensor out = options.quantize_context ? quantize_8bit(context) : context.to(DType::F32);
  if (options.context_blur_max <= 0 && options.context_sharpen_max <= 0) return out;
  const int64_t batch = context.size(0);
  auto uniform = [&](double max) {  // [batch] ~ U(0, max), drawn only when max > 0
    std::vector<double> v(static_cast<std::size_t>(batch), 0.0);
    if (max <= 0) return v;
    const Tensor u = Tensor::rand({batch}, gen, DType::F64);
    for (int64_t i = 0; i < batch; ++i) v[static_cast<std::size_t>(i)] = u.data<double>()[i] * max;
    return v;
  };
  std::vector<double> sigma = uniform(options.context_blur_max);
  if (options.context_sharpen_max <= 0) return blur_frames(out, sigma);
  // out + s (blur(out) - out): s = 1 blurs, s = -1 unsharp-masks by the same kernel.
  const std::vector<double> sharpen_sigma = uniform(options.context_sharpen_max),
                            coin = uniform(1.0);
  std::vector<float> sign(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < sign.size(); ++i) {
    const bool sharpen = coin[i] < 0.5;
    sign[i] = sharpen ? -1.0F : 1.0F;
    if (sharpen) sigma[i] = sharpen_sigma[i];
  }
  const Tensor s = Tensor::from_vector(sign).reshape({batch, 1, 1, 1});
  return clamp(add(out, mul(sub(blur_frames(out, sigma), out), s)), -1.0, 1.0)
      .contiguous(MemoryFormat::ChannelsLast);
}

namespace {

// A direct predictor's output for `context` (network dtype, channels_last): its input frame is
// zeros and its timestep 0, fixed, so the network learns them as constants.
Tensor direct_forward(UNetVideo& model, const Tensor& context, const Tensor& context_sigma,
                      int64_t channels) {
  const int64_t batch = context.size(0);
  const Tensor nothing = Tensor::zeros({batch, channels, context.size(2), context.size(3)},
                                       context.dtype(), MemoryFormat::ChannelsLast);
  return model.forward(nothing, context, Tensor::zeros({batch}, DType::I64), context_sigma)
      .to(DType::F32);
}

// The frame a prediction stands for: for a residual model the change added to `last`, which a
// motion model (two more channels: the flow) first warps; else the prediction itself.
Tensor frame_of(const Tensor& prediction, const Tensor& last) {
  if (!last.defined()) return prediction;
  const int64_t channels = last.size(1);
  if (prediction.size(1) == channels)
    return add(last.to(DType::F32), mul(prediction, 2.0));
  return add(warp(last.to(DType::F32), prediction.narrow(1, channels, 2)),
             mul(prediction.narrow(1, 0, channels), 2.0));
}

// The context noise std per sample ~ U(0, max) [B] (zeros when off), the same for all its
// context frames: the model sees contexts from clean to visibly degraded.
Tensor context_noise_std(int64_t batch, const VideoLossOptions& options, Generator& gen) {
  return options.context_noise_max > 0
             ? mul(Tensor::rand({batch}, gen), options.context_noise_max)
             : Tensor::zeros({batch});
}

// Gaussian noise of each sample's std for `context` [B, ...] (f32, no gradient).
Tensor context_noise(const Tensor& context, const Tensor& sigma, Generator& gen) {
  NoGrad no_grad;
  return mul(Tensor::randn(context.shape(), gen), sigma.reshape({context.size(0), 1, 1, 1}));
}

}  // namespace

Tensor sample_next_frames(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& context,
                          const Tensor& context_sigma, const Tensor& noise, int64_t steps,
                          Prediction prediction, DType input_dtype, const Tensor& last) {
  NoGrad no_grad;
  const Tensor ctx = context.to(input_dtype).contiguous(MemoryFormat::ChannelsLast);
  if (prediction == Prediction::Direct)
    return clamp(frame_of(direct_forward(model, ctx, context_sigma, noise.size(1)), last), -1.0,
                 1.0);
  const Denoiser denoise = [&](const Tensor& x_t, const Tensor& t) {
    return model.forward(x_t.to(input_dtype).contiguous(MemoryFormat::ChannelsLast), ctx, t,
                         context_sigma);
  };
  const Tensor sampled = ddim_sample(denoise, noise, schedule, steps, prediction);
  return last.defined() ? clamp(frame_of(sampled, last), -1.0, 1.0) : sampled;
}

namespace {

// A rigid motion of the plane, p -> R (p - from) + to, R the rotation by the angle (cos, sin).
struct Rigid {
  double c = 1, s = 0, from_x = 0, from_y = 0, to_x = 0, to_y = 0;
  double x(double px, double py) const { return c * (px - from_x) - s * (py - from_y) + to_x; }
  double y(double px, double py) const { return s * (px - from_x) + c * (py - from_y) + to_y; }
};

// One batch element of rigid_layers. d [2, H, W], open [H, W] and the previous frame's map
// previous [2, H, W] (or null) in; support [H, W] in (sprite labels, or null: make them here) and
// out; out_d [2, H, W] and out_open [H, W] out.
class RigidLayers {
 public:
  RigidLayers(const float* d, const float* open, const float* previous, const float* flow,
              int64_t h, int64_t w)
      : d_(d), open_(open), previous_(previous), flow_(flow), h_(h), w_(w), n_(h * w) {}

  // anchor [C, H, W]: where the sprites are cut from (its edges split them).
  void run(const float* anchor, int64_t channels, const float* support_in, float* support_out,
           float* out_d, float* out_open) {
    if (support_in != nullptr) {
      std::copy(support_in, support_in + n_, support_out);
      if (previous_ != nullptr) {
        before_ = previous_sprites(support_out);
        if (flow_ != nullptr) find_owners(support_out);
      }
    }
    find_regions();
    if (support_in == nullptr) make_support(support_out, anchor, channels);
    render(support_out, out_d, out_open);
  }

 private:
  double px(int64_t i) const { return static_cast<double>(i % w_); }
  double py(int64_t i) const { return static_cast<double>(i / w_); }
  // Where pixel i reads, in the anchor (by this frame's map, or by the previous one).
  double sx(int64_t i) const { return px(i) + d_[i]; }
  double sy(int64_t i) const { return py(i) + d_[n_ + i]; }
  // The anchor pixel nearest to where `r` takes pixel i, or -1 outside the frame.
  int64_t nearest(const Rigid& r, int64_t i) const {
    const auto x = static_cast<int64_t>(std::lround(r.x(px(i), py(i))));
    const auto y = static_cast<int64_t>(std::lround(r.y(px(i), py(i))));
    return x >= 0 && x < w_ && y >= 0 && y < h_ ? y * w_ + x : -1;
  }

  // The rigid motion that takes the pixels `used` closest to where they read (least squares:
  // the 2-D Procrustes angle from the cross-covariance); with fewer than 3, the mean translation.
  Rigid fit(const std::vector<int64_t>& used, const float* map) const {
    const auto read_x = [&](int64_t i) { return px(i) + map[i]; };
    const auto read_y = [&](int64_t i) { return py(i) + map[n_ + i]; };
    Rigid r;
    for (const int64_t i : used) {
      r.from_x += px(i), r.from_y += py(i), r.to_x += read_x(i), r.to_y += read_y(i);
    }
    const auto m = static_cast<double>(used.size());
    r.from_x /= m, r.from_y /= m, r.to_x /= m, r.to_y /= m;
    if (used.size() < 3) return r;
    double dot = 0, cross = 0;
    for (const int64_t i : used) {
      const double ax = px(i) - r.from_x, ay = py(i) - r.from_y;
      const double bx = read_x(i) - r.to_x, by = read_y(i) - r.to_y;
      dot += ax * bx + ay * by;
      cross += ax * by - ay * bx;
    }
    const double angle = std::atan2(cross, dot);
    r.c = std::cos(angle), r.s = std::sin(angle);
    return r;
  }
  // fit, then fitted once more without the pixels it misses by more than a pixel (a frayed
  // outline) unless that leaves fewer than half.
  Rigid robust_fit(const std::vector<int64_t>& used, const float* map = nullptr) const {
    if (map == nullptr) map = d_;
    const Rigid first = fit(used, map);
    std::vector<int64_t> inliers;
    for (const int64_t i : used)
      if (std::hypot(first.x(px(i), py(i)) - px(i) - map[i],
                     first.y(px(i), py(i)) - py(i) - map[n_ + i]) <= 1.0)
        inliers.push_back(i);
    return inliers.size() * 2 >= used.size() && inliers.size() < used.size()
               ? fit(inliers, map)
               : first;
  }

  // The sprites in the previous map: the previous pixels that read inside each (where the map
  // is not 0: a rigid map is 0 only off the sprites, or for a sprite exactly where the anchor had
  // it, which stays there anyway) and its motion fitted to them (exact: that map is rigid on
  // every sprite); none where no pixel reads it.
  struct PreviousSprites {
    std::vector<std::vector<int64_t>> pixels;
    std::vector<std::optional<Rigid>> motion;
  };
  PreviousSprites previous_sprites(const float* support) const {
    const auto sprites = static_cast<std::size_t>(*std::max_element(support, support + n_));
    PreviousSprites out{.pixels = std::vector<std::vector<int64_t>>(sprites + 1),
                        .motion = std::vector<std::optional<Rigid>>(sprites + 1)};
    for (int64_t i = 0; i < n_; ++i) {
      if (previous_[i] == 0 && previous_[n_ + i] == 0) continue;
      const auto x = static_cast<int64_t>(std::lround(px(i) + previous_[i]));
      const auto y = static_cast<int64_t>(std::lround(py(i) + previous_[n_ + i]));
      if (x >= 0 && x < w_ && y >= 0 && y < h_ && support[y * w_ + x] > 0)
        out.pixels[static_cast<std::size_t>(support[y * w_ + x])].push_back(i);
    }
    for (std::size_t s = 1; s <= sprites; ++s)
      if (!out.pixels[s].empty()) out.motion[s] = robust_fit(out.pixels[s], previous_);
    return out;
  }

  // Each anchor pixel labelled by the sprite within kMargin pixels of it (0: none).
  static constexpr int64_t kMargin = 3;
  std::vector<float> margin_labels(const float* support) const {
    std::vector<float> near(static_cast<std::size_t>(n_), 0.0f);
    for (int64_t i = 0; i < n_; ++i) {
      if (support[i] == 0) continue;
      const int64_t y = i / w_, x = i % w_;
      for (int64_t yy = std::max<int64_t>(y - kMargin, 0); yy <= std::min(y + kMargin, h_ - 1); ++yy)
        for (int64_t xx = std::max<int64_t>(x - kMargin, 0); xx <= std::min(x + kMargin, w_ - 1); ++xx)
          if (near[static_cast<std::size_t>(yy * w_ + xx)] == 0)
            near[static_cast<std::size_t>(yy * w_ + xx)] = support[i];
    }
    return near;
  }

  // Which pixels may move each sprite: an open pixel whose flow takes it, in the previous
  // frame, onto a sprite the previous map moved (that sprite's rigid motion takes the point
  // inside it) may move that sprite; one whose flow takes it onto no sprite may move only
  // sprites the previous map did not. Why: the gate also opens on the trail between where a
  // shape was in the anchor and where it is; those pixels read the background in place, which is
  // inside the shape's anchor pixels, and as members they pulled every moving sprite back to a
  // stop within ten frames.
  void find_owners(const float* support) {
    const std::vector<std::optional<Rigid>>& motion = before_.motion;
    owner_.assign(static_cast<std::size_t>(n_), 0);
    was_moved_.assign(motion.size(), false);
    for (std::size_t s = 1; s < motion.size(); ++s) was_moved_[s] = motion[s].has_value();
    for_pixels([&](int64_t i) {
      if (open_[i] <= 0.5f) return;
      const double qx = px(i) + flow_[i], qy = py(i) + flow_[n_ + i];
      for (std::size_t s = 1; s < motion.size(); ++s) {
        if (!motion[s]) continue;
        const auto x = static_cast<int64_t>(std::lround(motion[s]->x(qx, qy)));
        const auto y = static_cast<int64_t>(std::lround(motion[s]->y(qx, qy)));
        if (x >= 0 && x < w_ && y >= 0 && y < h_ && support[y * w_ + x] == static_cast<float>(s)) {
          owner_[static_cast<std::size_t>(i)] = static_cast<int64_t>(s);
          break;
        }
      }
    });
  }
  // Whether pixel i may move `sprite`, which its map reads it from.
  bool may_move(int64_t i, int64_t sprite) const {
    return owner_.empty() || owner_[static_cast<std::size_t>(i)] == sprite ||
           !was_moved_[static_cast<std::size_t>(sprite)];
  }

  // Regions: 4-connected open pixels whose neighbours read anchor points 1 +- 0.75 px apart (a
  // rigid map keeps distances however far it has turned; two shapes crossing read far apart).
  // One of fewer than kMinRegion pixels (a scrap of an outline the gate opened on its own) cuts
  // no sprite and moves none.
  static constexpr std::size_t kMinRegion = 8;
  void find_regions() {
    std::vector<int64_t> region_of(static_cast<std::size_t>(n_), -1);  // -1: not yet reached
    std::vector<int64_t> stack;
    for (int64_t start = 0; start < n_; ++start) {
      if (open_[start] <= 0.5f || region_of[static_cast<std::size_t>(start)] >= 0) continue;
      const auto id = static_cast<int64_t>(regions_.size());
      regions_.emplace_back();
      region_of[static_cast<std::size_t>(start)] = id;
      stack.push_back(start);
      while (!stack.empty()) {
        const int64_t i = stack.back();
        stack.pop_back();
        regions_.back().push_back(i);
        const int64_t y = i / w_, x = i % w_;
        for (const int64_t j : {y > 0 ? i - w_ : -1, y + 1 < h_ ? i + w_ : -1,
                                x > 0 ? i - 1 : -1, x + 1 < w_ ? i + 1 : -1}) {
          if (j < 0 || open_[j] <= 0.5f || region_of[static_cast<std::size_t>(j)] >= 0 ||
              std::abs(std::hypot(sx(j) - sx(i), sy(j) - sy(i)) - 1.0) > 0.75)
            continue;
          region_of[static_cast<std::size_t>(j)] = id;
          stack.push_back(j);
        }
      }
    }
  }

  // The sprites: where this frame's regions read in the anchor (each pixel's fitted source,
  // rounded), grown by one pixel (the holes a turned grid leaves, and the anti-aliased outline
  // the gates leave out), as 8-connected components labelled 1, 2, ... (0: no sprite).
  void make_support(float* support, const float* anchor, int64_t channels) const {
    std::vector<uint8_t> hit(static_cast<std::size_t>(n_), 0), grown(hit.size(), 0);
    for (const std::vector<int64_t>& region : regions_) {
      if (region.size() < kMinRegion) continue;
      const Rigid r = robust_fit(region);
      for (const int64_t i : region)
        if (const int64_t q = nearest(r, i); q >= 0) hit[static_cast<std::size_t>(q)] = 1;
    }
    const auto around = [&](int64_t i, auto&& visit) {  // the 8-neighbours of pixel i
      const int64_t y = i / w_, x = i % w_;
      for (int64_t yy = std::max<int64_t>(y - 1, 0); yy <= std::min(y + 1, h_ - 1); ++yy)
        for (int64_t xx = std::max<int64_t>(x - 1, 0); xx <= std::min(x + 1, w_ - 1); ++xx)
          if (yy * w_ + xx != i) visit(yy * w_ + xx);
    };
    for (int64_t i = 0; i < n_; ++i) {
      grown[static_cast<std::size_t>(i)] = hit[static_cast<std::size_t>(i)];
      around(i, [&](int64_t j) { grown[static_cast<std::size_t>(i)] |= hit[static_cast<std::size_t>(j)]; });
    }
    // The anchor's edges (largest per-channel central difference over 0.1, on [-1, 1]) split
    // what was cut: two shapes touching in the anchor are two sprites, however alike their
    // first maps.
    const auto edge = [&](int64_t i) {
      const int64_t y = i / w_, x = i % w_;
      const int64_t x0 = std::max<int64_t>(x - 1, 0), x1 = std::min(x + 1, w_ - 1);
      const int64_t y0 = std::max<int64_t>(y - 1, 0), y1 = std::min(y + 1, h_ - 1);
      double most = 0;
      for (int64_t c = 0; c < channels; ++c) {
        const float* a = anchor + c * n_;
        most = std::max(most, std::hypot((a[y * w_ + x1] - a[y * w_ + x0]) / static_cast<double>(x1 - x0),
                                         (a[y1 * w_ + x] - a[y0 * w_ + x]) / static_cast<double>(y1 - y0)));
      }
      return most > 0.1;
    };
    std::fill(support, support + n_, 0.0f);
    std::vector<int64_t> queue;
    float label = 0;
    const auto flood = [&](int64_t start, auto&& joins) {  // labels start's component
      support[start] = ++label;
      std::vector<int64_t> stack{start};
      while (!stack.empty()) {
        const int64_t i = stack.back();
        stack.pop_back();
        queue.push_back(i);
        around(i, [&](int64_t j) {
          if (grown[static_cast<std::size_t>(j)] == 0 || support[j] != 0 || !joins(i, j)) return;
          support[j] = label;
          stack.push_back(j);
        });
      }
    };
    // The flat insides: 4-connected runs of at least 4 grown pixels that are not edges (fewer:
    // a corner of the grown rim, which would take outline pixels from the shape beside it).
    for (int64_t i = 0; i < n_; ++i) {
      if (grown[static_cast<std::size_t>(i)] == 0 || support[i] != 0 || edge(i)) continue;
      const std::size_t before = queue.size();
      flood(i, [&](int64_t a, int64_t b) {
        return !edge(b) && (a / w_ == b / w_ || a % w_ == b % w_);
      });
      if (queue.size() - before >= 4) continue;
      for (std::size_t j = before; j < queue.size(); ++j) support[queue[j]] = -1;  // not again
      queue.resize(before);
      --label;
    }
    for (int64_t i = 0; i < n_; ++i) support[i] = std::max(support[i], 0.0f);
    // Each outline pixel joins the nearest inside (breadth first, in label order).
    for (std::size_t head = 0; head < queue.size(); ++head)
      around(queue[head], [&](int64_t j) {
        if (grown[static_cast<std::size_t>(j)] == 0 || support[j] != 0) return;
        support[j] = support[queue[head]];
        queue.push_back(j);
      });
    // A cut with no inside at all (a sliver): one sprite of its own.
    for (int64_t i = 0; i < n_; ++i)
      if (grown[static_cast<std::size_t>(i)] != 0 && support[i] == 0)
        flood(i, [](int64_t, int64_t) { return true; });
  }

  // Each sprite moves by the rigid fit of the open pixels that read inside it, and covers every
  // pixel that motion takes into it. Where two sprites cover a pixel (one shape in front of
  // another), the one the pixel itself read wins, else the one with more pixels. A
  // sprite no region reads this frame stays where the previous map had it: a shape the gate
  // misses once is not lost for good.
  void render(const float* support, float* out_d, float* out_open) const {
    const auto sprites = static_cast<int64_t>(*std::max_element(support, support + n_));
    std::vector<std::vector<int64_t>> members(static_cast<std::size_t>(sprites) + 1);
    // Each pixel of a region joins the sprite its own map reads it from (a region the gate
    // opened over two touching shapes feeds both); own[i] remembers which.
    std::vector<int64_t> own(static_cast<std::size_t>(n_), 0);
    for (const std::vector<int64_t>& region : regions_) {
      if (region.size() < kMinRegion) continue;
      for (const int64_t i : region) {
        const auto x = static_cast<int64_t>(std::lround(sx(i)));
        const auto y = static_cast<int64_t>(std::lround(sy(i)));
        if (x < 0 || x >= w_ || y < 0 || y >= h_) continue;
        const auto sprite = static_cast<int64_t>(support[y * w_ + x]);
        if (sprite == 0 || !may_move(i, sprite)) continue;  // outside every sprite, or a trail
        own[static_cast<std::size_t>(i)] = sprite;
        members[static_cast<std::size_t>(sprite)].push_back(i);
      }
    }
    std::vector<Rigid> motion(members.size());
    for (std::size_t s = 1; s < members.size(); ++s)
      if (!members[s].empty()) motion[s] = robust_fit(members[s]);
    for (std::size_t s = 1; s < before_.motion.size() && s < members.size(); ++s)
      if (members[s].empty() && before_.motion[s]) {
        motion[s] = *before_.motion[s];
        members[s] = before_.pixels[s];
      }
    std::fill(out_d, out_d + 2 * n_, 0.0f);
    std::fill(out_open, out_open + n_, 0.0f);
    for_pixels([&](int64_t i) {
      int64_t chosen = 0;
      for (std::size_t s = 1; s < members.size(); ++s) {
        if (members[s].empty()) continue;
        const int64_t q = nearest(motion[s], i);
        if (q < 0 || static_cast<std::size_t>(support[q]) != s) continue;
        if (static_cast<int64_t>(s) == own[static_cast<std::size_t>(i)]) {
          chosen = static_cast<int64_t>(s);
          break;
        }
        if (chosen == 0 || members[s].size() > members[static_cast<std::size_t>(chosen)].size())
          chosen = static_cast<int64_t>(s);
      }
      if (chosen == 0) return;
      const Rigid& r = motion[static_cast<std::size_t>(chosen)];
      out_open[i] = 1.0f;
      out_d[i] = static_cast<float>(r.x(px(i), py(i)) - px(i));
      out_d[n_ + i] = static_cast<float>(r.y(px(i), py(i)) - py(i));
    });
    // Around each sprite (closed pixels that its motion takes within kMargin pixels of it), the
    // map carries on with the sprite's motion: the next frame composes its flow with this map
    // bilinearly, and a sprite's edge pixels would otherwise read a mix of its motion and 0 ("where
    // the anchor had it"), a pull back toward the anchor that slows every shape frame by frame.
    const std::vector<float> near = margin_labels(support);
    for_pixels([&](int64_t i) {
      if (out_open[i] != 0) return;
      for (std::size_t s = 1; s < members.size(); ++s) {
        if (members[s].empty()) continue;
        const int64_t q = nearest(motion[s], i);
        if (q < 0 || static_cast<std::size_t>(near[static_cast<std::size_t>(q)]) != s) continue;
        out_d[i] = static_cast<float>(motion[s].x(px(i), py(i)) - px(i));
        out_d[n_ + i] = static_cast<float>(motion[s].y(px(i), py(i)) - py(i));
        break;
      }
    });
  }

  // Calls pixel(i) for every pixel, on the pool's threads: for work that reads shared state
  // and writes only pixel i's own outputs (so the results do not depend on the split).
  template <class Pixel>
  void for_pixels(const Pixel& pixel) const {
    parallel_for(0, n_, 256, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) pixel(i);
    });
  }

  const float *d_, *open_, *previous_, *flow_;
  int64_t h_, w_, n_;
  PreviousSprites before_;  // with a previous map and given sprites; else empty
  // find_owners(): the sprite each pixel came from (0: none) and which sprites the previous map
  // moved. Empty without a previous map and flow (then any pixel may move any sprite).
  std::vector<int64_t> owner_;
  std::vector<bool> was_moved_;
  std::vector<std::vector<int64_t>> regions_;
};

}  // namespace

Tensor clean_plate(const Tensor& anchor, const Tensor& support) {
  MIXPREC_CHECK(anchor.dim() == 4 && support.dim() == 4 && support.size(1) == 1 &&
                    support.size(0) == anchor.size(0) && support.size(2) == anchor.size(2) &&
                    support.size(3) == anchor.size(3),
                "[clean_plate] expected anchor [B, C, H, W] and support [B, 1, H, W], got ",
                shape_to_string(anchor.shape()), " and ", shape_to_string(support.shape()));
  const Tensor image = anchor.detach().to(DType::F32).contiguous();
  const Tensor sprites = support.detach().to(DType::F32).contiguous();
  Tensor out = Tensor::empty(image.shape(), DType::F32);
  NoGrad no_grad;
  capture::launch("clean_plate", {&image, &sprites}, {&out}, [](const capture::KernelArgs& k) {
    const int64_t b = k.out(0).size(0), c = k.out(0).size(1), h = k.out(0).size(2),
                  w = k.out(0).size(3), n = h * w;
    std::vector<uint8_t> known(static_cast<std::size_t>(n)), next;
    std::vector<double> sum(static_cast<std::size_t>(c));
    for (int64_t i = 0; i < b; ++i) {
      const float* in = k.in(0).data<float>() + i * c * n;
      const float* cover = k.in(1).data<float>() + i * n;
      float* plate = k.out(0).data<float>() + i * c * n;
      std::copy(in, in + c * n, plate);
      // Unknown: the sprites and a pixel around them (what of a shape's anti-aliased outline or
      // thin tips its sprite left out would otherwise stay behind, still, where the shape was).
      for (int64_t j = 0; j < n; ++j) {
        const int64_t y = j / w, x = j % w;
        bool near = false;
        for (int64_t yy = std::max<int64_t>(y - 1, 0); yy <= std::min(y + 1, h - 1); ++yy)
          for (int64_t xx = std::max<int64_t>(x - 1, 0); xx <= std::min(x + 1, w - 1); ++xx)
            near |= cover[yy * w + xx] != 0;
        known[static_cast<std::size_t>(j)] = !near;
      }
      // Peel the unknown pixels from outside in: each becomes the mean of its known
      // 8-neighbours (those known before this peel), until none is left.
      for (bool left = true; left;) {
        left = false;
        next = known;
        for (int64_t j = 0; j < n; ++j) {
          if (known[static_cast<std::size_t>(j)]) continue;
          const int64_t y = j / w, x = j % w;
          int64_t count = 0;
          std::fill(sum.begin(), sum.end(), 0.0);
          for (int64_t yy = std::max<int64_t>(y - 1, 0); yy <= std::min(y + 1, h - 1); ++yy)
            for (int64_t xx = std::max<int64_t>(x - 1, 0); xx <= std::min(x + 1, w - 1); ++xx) {
              if (!known[static_cast<std::size_t>(yy * w + xx)]) continue;
              ++count;
              for (int64_t ch = 0; ch < c; ++ch) sum[static_cast<std::size_t>(ch)] += plate[ch * n + yy * w + xx];
            }
          if (count == 0) {
            left = true;
            continue;
          }
          for (int64_t ch = 0; ch < c; ++ch)
            plate[ch * n + j] = static_cast<float>(sum[static_cast<std::size_t>(ch)] / static_cast<double>(count));
          next[static_cast<std::size_t>(j)] = 1;
        }
        if (next == known) break;  // nothing known at all: leave the anchor as it is
        known.swap(next);
      }
    }
  });
  return out;
}

RigidLayersResult rigid_layers(const Tensor& displacement, const Tensor& open,
                               const Tensor& anchor, const Tensor& support,
                               const Tensor& previous, const Tensor& flow) {
  const auto same_plane = [&](const Tensor& t) {
    return t.dim() == 4 && t.size(1) == 1 && t.size(0) == displacement.size(0) &&
           t.size(2) == displacement.size(2) && t.size(3) == displacement.size(3);
  };
  MIXPREC_CHECK(displacement.dim() == 4 && displacement.size(1) == 2 && same_plane(open) &&
                    anchor.dim() == 4 && anchor.size(0) == displacement.size(0) &&
                    anchor.size(2) == displacement.size(2) &&
                    anchor.size(3) == displacement.size(3) &&
                    (!support.defined() || same_plane(support)) &&
                    (!previous.defined() || previous.shape() == displacement.shape()) &&
                    (!flow.defined() || flow.shape() == displacement.shape()),
                "[rigid_layers] expected displacement, previous and flow [B, 2, H, W], open and "
                "support [B, 1, H, W] and anchor [B, C, H, W], got ", shape_to_string(displacement.shape()),
                ", ", shape_to_string(anchor.shape()), ", ",
                previous.defined() ? shape_to_string(previous.shape()) : "none", ", ",
                shape_to_string(open.shape()), " and ",
                support.defined() ? shape_to_string(support.shape()) : "none");
  const Tensor d = displacement.detach().to(DType::F32).contiguous();
  const Tensor gate = open.detach().to(DType::F32).contiguous();
  const Tensor image = anchor.detach().to(DType::F32).contiguous();
  const Tensor given = support.defined() ? support.detach().to(DType::F32).contiguous() : Tensor();
  const auto plain = [](const Tensor& t) {
    return t.defined() ? t.detach().to(DType::F32).contiguous() : Tensor();
  };
  const Tensor before = plain(previous), moved = plain(flow);
  RigidLayersResult out{.displacement = Tensor::empty(d.shape(), DType::F32),
                        .open = Tensor::empty(gate.shape(), DType::F32),
                        .support = Tensor::empty(gate.shape(), DType::F32)};
  NoGrad no_grad;
  capture::launch(
      "rigid_layers",
      {&d, &gate, &image, support.defined() ? &given : nullptr,
       previous.defined() ? &before : nullptr, flow.defined() ? &moved : nullptr},
      {&out.displacement, &out.open, &out.support}, [](const capture::KernelArgs& k) {
        const int64_t b = k.out(0).size(0), h = k.out(0).size(2), w = k.out(0).size(3), n = h * w;
        const int64_t c = k.in(2).size(1);
        for (int64_t i = 0; i < b; ++i)
          RigidLayers(k.in(0).data<float>() + i * 2 * n, k.in(1).data<float>() + i * n,
                      k.optional(4) != nullptr ? k.optional(4)->data<float>() + i * 2 * n : nullptr,
                      k.optional(5) != nullptr ? k.optional(5)->data<float>() + i * 2 * n : nullptr,
                      h, w)
              .run(k.in(2).data<float>() + i * c * n, c,
                   k.optional(3) != nullptr ? k.optional(3)->data<float>() + i * n : nullptr,
                   k.out(2).data<float>() + i * n, k.out(0).data<float>() + i * 2 * n,
                   k.out(1).data<float>() + i * n);
      });
  return out;
}

AnchorMapFrame anchor_map_frame(const Tensor& prediction, const Tensor& anchor,
                                const Tensor& last, const Tensor& displacement, bool rigid,
                                const Tensor& support, const Tensor& plate) {
  const int64_t channels = anchor.size(1);
  // The network's change, flow and two map gates, then a reflecting model's two gates.
  const bool reflect = prediction.dim() == 4 && prediction.size(1) == channels + 6;
  MIXPREC_CHECK(prediction.dim() == 4 && (prediction.size(1) == channels + 4 || reflect) &&
                    last.shape() == anchor.shape() &&
                    displacement.dim() == 4 && displacement.size(1) == 2 &&
                    anchor.size(0) == prediction.size(0) &&
                    displacement.size(0) == prediction.size(0) &&
                    anchor.size(2) == prediction.size(2) && anchor.size(3) == prediction.size(3) &&
                    displacement.size(2) == prediction.size(2) &&
                    displacement.size(3) == prediction.size(3),
                "[anchor_map_frame] expected prediction [B, ", channels + 4, " or ", channels + 6,
                ", H, W], anchor and last [B, ", channels,
                ", H, W] and displacement [B, 2, H, W], got ", shape_to_string(prediction.shape()),
                ", ", shape_to_string(anchor.shape()), ", ", shape_to_string(last.shape()), " and ",
                shape_to_string(displacement.shape()));
  // Each gate is a step, exactly 1 or 0: a sigmoid's 0.99 would shrink the map by 1% a frame and
  // pull every shape back to where it was in the anchor. The step is a clamp of a slope of 2^60
  // (0 for logits <= 0); its gradient is the sigmoid's (straight through).
  const auto step = [&](int64_t at, int64_t count = 1) {
    const Tensor logit = prediction.narrow(1, at, count).to(DType::F32);
    Tensor gate = clamp(mul(logit.detach(), 0x1p60), 0.0, 1.0);
    if (!grad_enabled()) return gate;
    const Tensor soft = sigmoid(logit);
    return add(gate, sub(soft, soft.detach()));  // + 0 exactly, with the sigmoid's gradient
  };
  Tensor flow = prediction.narrow(1, channels, 2).to(DType::F32);
  // A reflect gate turns its axis's flow around, exactly: times 1 - 2 step.
  if (reflect) flow = mul(flow, sub(1.0, mul(step(channels + 4, 2), 2.0)));
  const Tensor open = step(channels + 2);
  const Tensor composed = mul(add(flow, warp(displacement.to(DType::F32), flow)), open);
  const Tensor source = anchor.to(DType::F32);
  if (rigid) {
    const RigidLayersResult layers =
        rigid_layers(composed, open, source, support, displacement, flow);
    const Tensor background = plate.defined() ? plate : clean_plate(source, layers.support);
    return {.frame = add(mul(warp(source, layers.displacement), layers.open),
                         mul(background, sub(1.0, layers.open))),
            .displacement = layers.displacement,
            .gate = layers.open,
            .flow = flow,
            .support = layers.support,
            .plate = background};
  }
  // Exactly one of three reads (x * 1 + y * 0 is x): the anchor through the map; or, closed, the
  // anchor in place or the last frame in place.
  const Tensor in_place = step(channels + 3);
  const Tensor still = add(mul(source, in_place), mul(last.to(DType::F32), sub(1.0, in_place)));
  const Tensor read = add(mul(warp(source, composed), open), mul(still, sub(1.0, open)));
  const Tensor frame = add(read, mul(prediction.narrow(1, 0, channels).to(DType::F32), 2.0));
  return {.frame = frame,
          .displacement = composed,
          .gate = open,
          .flow = flow,
          .support = {},
          .plate = {}};
}

AnchorMapFrame sample_anchor_map_frames(UNetVideo& model, const Tensor& context,
                                        const Tensor& context_sigma, const Tensor& anchor,
                                        const Tensor& last, const Tensor& displacement,
                                        bool rigid, const Tensor& support,
                                        const Tensor& plate) {
  MIXPREC_CHECK(model.config().anchor_map, "[sample_anchor_map_frames] not an anchor-map model");
  NoGrad no_grad;
  AnchorMapFrame next = anchor_map_frame(
      direct_forward(model, context, context_sigma, model.config().frame_channels), anchor, last,
      displacement, rigid, support, plate);
  next.frame = clamp(next.frame, -1.0, 1.0);
  return next;
}

Tensor restore_frames(UNetVideo& restorer, const Tensor& frames) {
  MIXPREC_CHECK(restorer.config().context_frames == 1 && !restorer.config().motion &&
                    !restorer.config().anchor_frame && frames.dim() == 4 &&
                    frames.size(1) == restorer.config().frame_channels,
                "[restore_frames] expected a restorer with one context frame, no motion or "
                "anchor, and frames [B, ", restorer.config().frame_channels, ", H, W], got ",
                shape_to_string(frames.shape()));
  NoGrad no_grad;
  const DType dtype = parameter_dtype(restorer);
  const Tensor input = frames.to(dtype).contiguous(MemoryFormat::ChannelsLast);
  return clamp(frame_of(direct_forward(restorer, input, Tensor(), frames.size(1)), frames), -1.0,
               1.0);
}

Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule,
                            const Tensor& context, const Tensor& current,
                            const VideoLossOptions& options, DType input_dtype, Generator& gen) {
  MIXPREC_CHECK(current.dim() == 4 && context.dim() == 4 && context.size(0) == current.size(0),
                "[video_diffusion_loss] expected context [B, 3K, H, W] and current [B, 3, H, W], "
                "got ",
                shape_to_string(context.shape()), " and ", shape_to_string(current.shape()));
  MIXPREC_CHECK(options.context_noise_max >= 0, "[video_diffusion_loss] negative context noise");
  MIXPREC_CHECK(options.prediction != Prediction::Direct,
                "[video_diffusion_loss] a direct predictor trains with video_rollout_loss");
  MIXPREC_CHECK(!model.config().motion,
                "[video_diffusion_loss] motion models are direct predictors (video_rollout_loss)");
  MIXPREC_CHECK(!model.config().anchor_frame,
                "[video_diffusion_loss] anchor models are direct predictors (video_rollout_loss)");
  const int64_t batch = current.size(0);
  Tensor x_t, target, noisy_context, timesteps, sigma;
  {
    NoGrad no_grad;
    timesteps = Tensor::empty({batch}, DType::I64);
    const Tensor u = Tensor::rand({batch}, gen, DType::F64);
    for (int64_t i = 0; i < batch; ++i)
      timesteps.data<int64_t>()[i] = std::min<int64_t>(
          schedule.steps() - 1,
          static_cast<int64_t>(u.data<double>()[i] * static_cast<double>(schedule.steps())));
    Tensor x0 = current.to(DType::F32);
    const Tensor noise = Tensor::randn(x0.shape(), gen);
    noisy_context = degrade_context(context, options, gen);
    sigma = context_noise_std(batch, options, gen);
    if (options.context_noise_max > 0)
      noisy_context = add(noisy_context, context_noise(noisy_context, sigma, gen));
    if (options.residual) {
      // Relative to the newest context frame as the network sees it, noise included: the
      // change to learn then also removes that noise, so a stream conditioned on a little noise
      // cleans up its own grain instead of accumulating it.
      const int64_t c = current.size(1);
      x0 = mul(sub(x0, noisy_context.narrow(1, noisy_context.size(1) - c, c)), 0.5);
    }
    x_t = schedule.add_noise(x0, noise, timesteps);
    target = schedule.target(x0, noise, timesteps, options.prediction);
  }
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const Tensor out = model.forward(x_t.to(input_dtype).contiguous(cl),
                                   noisy_context.to(input_dtype).contiguous(cl), timesteps, sigma);
  return mse_loss(out.to(DType::F32), target.contiguous(cl));
}

RegressionLoss parse_regression_loss(const std::string& name) {
  if (name == "mse") return RegressionLoss::Mse;
  if (name == "l1") return RegressionLoss::L1;
  throw Error("[video] unknown regression loss '" + name + "', expected mse|l1");
}

namespace {

// The mean smooth absolute value sqrt(d^2 + eps^2) - eps of every element of d (f32).
Tensor mean_abs(const Tensor& d) {
  constexpr double kEps = 1e-3;  // well under one 8-bit level (2 / 255)
  return sub(mean(sqrt(add(mul(d, d), Tensor::scalar(kEps * kEps)))), Tensor::scalar(kEps));
}

// The binary cross-entropy of logits z against targets t in [0, 1], elementwise, in the form that
// cannot overflow: relu(z) - t z + log(1 + exp(-|z|)).
Tensor binary_cross_entropy(const Tensor& z, const Tensor& t) {
  const Tensor magnitude = add(relu(z), relu(neg(z)));
  return add(sub(relu(z), mul(t, z)), log(add(exp(neg(magnitude)), 1.0)));
}

// The mean of x over the elements where mask is 1 (0 when there are none).
Tensor masked_mean(const Tensor& x, const Tensor& mask) {
  const double count = std::max(1.0, sum(mask).item<double>());
  return mul(sum(mul(x, mask)), 1.0 / count);
}

// The mean over every element of the per-pixel error `kind` measures (f32).
Tensor regression_loss(const Tensor& predicted, const Tensor& target, RegressionLoss kind) {
  if (kind == RegressionLoss::Mse) return mse_loss(predicted, target);
  return mean_abs(sub(predicted, target));
}

}  // namespace

TurnTruth true_turns(const data::AnchorMaps& before, const data::AnchorMaps& now) {
  // Pixels a frame: slower, an axis has no direction to keep (a shape the data moves at all
  // moves faster than this; its centre's rounding errors are far below).
  constexpr float kMoving = 0.05f;
  MIXPREC_CHECK(before.motion.defined() && now.motion.defined() &&
                    before.motion.shape() == now.motion.shape() && now.motion.dim() == 4 &&
                    now.motion.size(1) == 2,
                "[true_turns] expected the maps' shape motion [B, 2, H, W] (data::AnchorMaps)");
  NoGrad no_grad;
  const Tensor d0 = before.motion.contiguous(), d1 = now.motion.contiguous();
  const Tensor in0 = mul(before.layer, before.valid).contiguous();
  const Tensor in1 = mul(now.layer, now.valid).contiguous();
  TurnTruth truth{.turned = Tensor::zeros(d1.shape(), DType::F32),
                  .graded = Tensor::zeros(d1.shape(), DType::F32)};
  const int64_t batch = d1.size(0), n = d1.size(2) * d1.size(3);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t axis = 0; axis < 2; ++axis)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = (b * 2 + axis) * n + i;
        const float m0 = d0.data<float>()[at], m1 = d1.data<float>()[at];
        // layer * valid is 1 exactly on a shape's inside with a defined map.
        if (in0.data<float>()[b * n + i] != 1.0f || in1.data<float>()[b * n + i] != 1.0f ||
            std::abs(m0) < kMoving || std::abs(m1) < kMoving)
          continue;
        truth.graded.data<float>()[at] = 1.0f;
        truth.turned.data<float>()[at] = (m0 < 0) != (m1 < 0) ? 1.0f : 0.0f;
      }
  return truth;
}

Tensor reflect_gate_loss(const Tensor& logits, const TurnTruth& truth) {
  return masked_mean(binary_cross_entropy(logits.to(DType::F32), truth.turned), truth.graded);
}

Tensor with_true_turns(const Tensor& prediction, const TurnTruth& truth) {
  const int64_t gates = prediction.size(1) - 2;
  const Tensor logits = prediction.narrow(1, gates, 2).to(DType::F32);
  // A logit of +-1 is decided by the step as surely as any: 1 where turned, 0 where not.
  const Tensor decided = sub(mul(truth.turned, 2.0), 1.0);
  const Tensor forced =
      add(mul(logits, sub(1.0, truth.graded)), mul(decided, truth.graded)).to(prediction.dtype());
  return cat({prediction.narrow(1, 0, gates), forced}, 1)
      .contiguous(MemoryFormat::ChannelsLast);
}

Tensor with_anchor(const Tensor& anchor, const Tensor& context) {
  if (!anchor.defined()) return context;
  return cat({anchor.to(context.dtype()), context}, 1).contiguous(MemoryFormat::ChannelsLast);
}

Tensor with_flow(const Tensor& context, const Tensor& flow) {
  if (!flow.defined()) return context;
  return cat({context, flow.to(context.dtype())}, 1).contiguous(MemoryFormat::ChannelsLast);
}

Tensor video_rollout_loss(UNetVideo& model, const std::vector<Tensor>& window,
                          const VideoLossOptions& options, DType input_dtype, Generator& gen,
                          const Tensor& anchor, std::vector<Tensor>* shown) {
  const auto k = static_cast<std::size_t>(model.config().context_frames);
  MIXPREC_CHECK(options.prediction == Prediction::Direct,
                "[video_rollout_loss] is the loss of a direct predictor");
  const bool anchor_map = model.config().anchor_map;
  MIXPREC_CHECK(anchor.defined() == (model.config().anchor_frame && !anchor_map),
                "[video_rollout_loss] ",
                anchor_map                    ? "an anchor-map model's anchor is its newest true "
                                                "context frame: pass none"
                : model.config().anchor_frame ? "an anchor model needs its anchor frame"
                                              : "an anchor frame for a model without one");
  MIXPREC_CHECK(!model.config().motion || options.residual,
                "[video_rollout_loss] a motion model predicts the change from its warped last "
                "frame: it needs residual");
  MIXPREC_CHECK(options.change_penalty >= 0 && (options.change_penalty == 0 || model.config().motion),
                "[video_rollout_loss] a change penalty is for motion models, and >= 0");
  MIXPREC_CHECK(options.free_run_max >= 0, "[video_rollout_loss] negative free run");
  MIXPREC_CHECK(options.map_weight >= 0 &&
                    (options.map_weight == 0 || (anchor_map && options.map_target)),
                "[video_rollout_loss] a map weight is for anchor-map models, with a map_target");
  MIXPREC_CHECK(options.free_run_regression >= 0 && options.free_run_regression <= 1,
                "[video_rollout_loss] free_run_regression must be in [0, 1]");
  MIXPREC_CHECK(!options.rigid_context || anchor_map,
                "[video_rollout_loss] a rigid context is for anchor-map models");
  MIXPREC_CHECK(options.true_flow_input >= 0 && options.true_flow_input <= 1 &&
                    (options.true_flow_input == 0 ||
                     (model.config().flow_input && options.map_target)),
                "[video_rollout_loss] a true flow input is for flow-input models with a "
                "map_target, as a fraction in [0, 1]");
  const auto free_max = static_cast<std::size_t>(options.free_run_max);
  MIXPREC_CHECK(window.size() > free_max + k, "[video_rollout_loss] expected ", free_max,
                " free-run frames, ", k, " context frames and at least one target, got ",
                window.size(), " frames");
  MIXPREC_CHECK(options.context_noise_max >= 0, "[video_rollout_loss] negative context noise");
  const int64_t batch = window[0].size(0), channels = window[0].size(1);
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const std::size_t free_run =
      free_max == 0 ? 0
                    : std::min<std::size_t>(free_max, static_cast<std::size_t>(
                                                          Tensor::rand({1}, gen, DType::F64)
                                                              .data<double>()[0] *
                                                          static_cast<double>(free_max + 1)));
  const std::size_t first = free_max - free_run;  // the window index of the oldest context frame
  std::vector<Tensor> frames;  // the context as a stream's viewer would see it, oldest first
  // displacement: the map the next frame composes with; map_error_of: the one the loss grades
  // (the same, except with a rigid context: then the network's own composition of the frame).
  Tensor sigma, anchor_input, displacement, sprites, plate, map_error_of;
  Tensor previous_flow;  // Config::flow_input: the last step's flow (zero before the first)
  {
    NoGrad no_grad;
    if (anchor.defined()) anchor_input = quantize_8bit(anchor).contiguous(cl);
    if (anchor_map) {  // the map starts at the newest true frame, as a stream's does
      anchor_input = quantize_8bit(window[first + k - 1].to(DType::F32)).contiguous(cl);
      displacement = Tensor::zeros({batch, 2, window[0].size(2), window[0].size(3)}, DType::F32,
                                   cl);
      if (model.config().flow_input) previous_flow = displacement;
      if (previous_flow.defined() && options.true_flow_input > 0 && k >= 2) {
        const Tensor truth = options.map_target(static_cast<int64_t>(first + k - 2),
                                                static_cast<int64_t>(first + k - 1))
                                 .offsets;
        const Tensor draw = Tensor::rand({batch}, gen, DType::F64);
        Tensor given = Tensor::empty({batch, 1, 1, 1}, DType::F32);
        for (int64_t i = 0; i < batch; ++i)
          given.data<float>()[i] = draw.data<double>()[i] < options.true_flow_input ? 1.0f : 0.0f;
        previous_flow = mul(truth.to(DType::F32), given).contiguous(cl);
      }
    }
    const auto begin = window.begin() + static_cast<std::ptrdiff_t>(first);
    const std::vector<Tensor> true_frames(begin, begin + static_cast<std::ptrdiff_t>(k));
    if (options.degrade_each_frame) {  // the K frames as K * B samples: a draw each
      const Tensor degraded = degrade_context(cat(true_frames, 0), options, gen);
      for (std::size_t i = 0; i < k; ++i)
        frames.push_back(degraded.narrow(0, static_cast<int64_t>(i) * batch, batch));
    } else {
      const Tensor degraded = degrade_context(context_of(true_frames), options, gen);
      for (std::size_t i = 0; i < k; ++i)
        frames.push_back(degraded.narrow(1, static_cast<int64_t>(i) * channels, channels));
    }
    sigma = context_noise_std(batch, options, gen);
  }
  // One frame of the rollout from `frames`: what the stream shows (clamped, 8-bit by a
  // straight-through rounding) becomes the newest context frame.
  struct Step {
    Tensor raw;     // the unclamped frame, for the loss
    Tensor change;  // a motion model's change after the warp, for its penalty
    Tensor gates;   // an anchor-map model's gate logits [B, 2, H, W]
    Tensor reflect; // a reflecting model's reflect logits [B, 2, H, W]
    TurnTruth turns; // ... and the renderer's turns they are graded against (with map_weight)
  };
  // The rollout's frame after `made_before` made ones (0: the first after the true context).
  auto step = [&](std::size_t made_before) {
    Tensor input = context_of(frames);
    if (options.context_noise_max > 0) input = add(input, context_noise(input, sigma, gen));
    input = with_flow(with_anchor(anchor_input, input), previous_flow);
    const Tensor out = direct_forward(model, input.to(input_dtype).contiguous(cl), sigma, channels);
    Step made{.raw = Tensor(),
              .change = model.config().motion ? out.narrow(1, 0, channels) : Tensor(),
              .gates = Tensor(),
              .reflect = Tensor(),
              .turns = {}};
    Tensor shown_frame;  // with rigid_context: the next context frame, as a rigid stream shows it
    if (anchor_map) {
      // A reflecting model in training turns the frame's flow where the renderer's shapes turn
      // (and keeps it where they do not); its own gates are graded against the same truth.
      Tensor turned_out = out;
      if (model.config().reflect) {
        made.reflect = out.narrow(1, channels + 4, 2);
        const auto index = static_cast<int64_t>(first + k + made_before);
        if (options.map_weight > 0 && index >= 2) {
          made.turns = true_turns(options.map_target(index - 2, index - 1),
                                  options.map_target(index - 1, index));
          turned_out = with_true_turns(out, made.turns);
        }
      }
      AnchorMapFrame rendered =
          anchor_map_frame(turned_out, anchor_input, frames.back(), displacement);
      made.raw = rendered.frame;
      if (previous_flow.defined()) previous_flow = rendered.flow.detach().contiguous(cl);
      if (options.rigid_context) {
        NoGrad no_grad;
        const AnchorMapFrame rigid = anchor_map_frame(turned_out.detach(), anchor_input, frames.back(),
                                                      displacement, true, sprites, plate);
        sprites = rigid.support;
        plate = rigid.plate;
        shown_frame = quantize_8bit(clamp(rigid.frame, -1.0, 1.0)).contiguous(cl);
        map_error_of = rendered.displacement;  // graded: the network's own composition
        displacement = rigid.displacement;
      } else {
        displacement = map_error_of = rendered.displacement;
      }
      // Painting is what a closed pixel is for (background a shape uncovers); on an open one
      // the map should do the work.
      made.change = mul(made.change, rendered.gate.detach());
      made.gates = out.narrow(1, channels + 2, 2);
    } else {
      made.raw = frame_of(out, options.residual ? frames.back() : Tensor());
    }
    Tensor next = clamp(made.raw, -1.0, 1.0);
    if (shown_frame.defined()) {
      next = shown_frame;
    } else if (options.quantize_context) {
      Tensor rounding;
      {
        NoGrad no_grad;
        rounding = sub(quantize_8bit(next), next.detach()).contiguous(cl);
      }
      next = add(next, rounding);  // straight through: rounded, with the gradient of identity
    }
    frames.erase(frames.begin());
    frames.push_back(next);
    return made;
  };
  {
    NoGrad no_grad;
    for (std::size_t j = 0; j < free_run; ++j) step(j);
  }
  if (shown != nullptr) {
    shown->clear();
    for (const Tensor& frame : frames) shown->push_back(frame.detach());
  }
  Tensor total;
  const std::size_t targets = window.size() - free_max - k;
  for (std::size_t j = 0; j < targets; ++j) {
    // The loss sees the unclamped frame (a clamped one would give no gradient where it is wrong
    // beyond the range); the next context gets what a stream keeps.
    const Step made = step(free_run + j);
    if (shown != nullptr) shown->push_back(frames.back());
    const double weight = free_run > 0 ? options.free_run_regression : 1.0;
    Tensor loss = regression_loss(made.raw, window[free_max + k + j].to(DType::F32).contiguous(cl),
                                  options.regression);
    if (weight != 1.0) loss = mul(loss, weight);
    if (options.change_penalty > 0)
      loss = add(loss, mul(mean_abs(mul(made.change, 2.0)), options.change_penalty));
    if (options.map_weight > 0) {
      const data::AnchorMaps truth = options.map_target(static_cast<int64_t>(first + k - 1),
                                                        static_cast<int64_t>(free_max + k + j));
      const Tensor error = sub(map_error_of, truth.offsets);
      const Tensor endpoint =
          sqrt(add(sum(mul(error, error), {1}, true), Tensor::scalar(1e-6)));
      // layer: 1 shape, 0 background, -1 outline.
      const Tensor inside = relu(truth.layer), background = sub(1.0, mul(truth.layer, truth.layer));
      const Tensor gate_loss =
          add(masked_mean(binary_cross_entropy(made.gates.narrow(1, 0, 1), inside),
                          add(inside, background)),
              masked_mean(binary_cross_entropy(made.gates.narrow(1, 1, 1), truth.valid),
                          background));
      Tensor map_loss = add(masked_mean(endpoint, truth.valid), gate_loss);
      if (made.turns.graded.defined())
        map_loss = add(map_loss, reflect_gate_loss(made.reflect, made.turns));
      loss = add(loss, mul(map_loss, options.map_weight));
    }
    total = j == 0 ? loss : add(total, loss);
  }
  return mul(total, 1.0 / static_cast<double>(targets));
}


}  // namespace mixprec::models
