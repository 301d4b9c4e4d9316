#include "mixprec/core/capture.h"
#include "mixprec/models/peaknet.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "metadata_fields.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/json.h"
#include "mixprec/io/module_file.h"
#include "mixprec/kernels/convnext.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/reduce.h"

namespace mixprec::models {
namespace {

constexpr const char* kFormat = "mixprec.peaknet";

Tensor channels_last(const Tensor& x) { return x.contiguous(MemoryFormat::ChannelsLast); }
// [B, C, H, W] laid out NHWC <-> its [B, H, W, C] view: no copy either way.
Tensor pixels_view(const Tensor& x) { return x.permute({0, 2, 3, 1}); }
Tensor channels_view(const Tensor& x) { return x.permute({0, 3, 1, 2}); }

// LayerNorm over the channels of each pixel.
Tensor channel_norm(nn::LayerNorm& norm, const Tensor& x) {
  return channels_view(norm.forward(pixels_view(x)));
}

Tensor up2(const Tensor& x) { return upsample(x, 2, kernels::UpsampleMode::Nearest); }

}  // namespace

void PeakNetConfig::validate() const {
  MIXPREC_CHECK(!widths.empty() && widths.size() == depths.size(),
                "[PeakNet] widths and depths need one entry per level, got ", widths.size(),
                " and ", depths.size());
  for (std::size_t i = 0; i < widths.size(); ++i)
    MIXPREC_CHECK(widths[i] >= 1 && depths[i] >= 0, "[PeakNet] level ", i, ": width ", widths[i],
                  " must be >= 1, depth ", depths[i], " >= 0");
  MIXPREC_CHECK(stem_channels >= 1 && mlp_ratio >= 1 && kernel >= 1 && kernel % 2 == 1,
                "[PeakNet] stem_channels and mlp_ratio must be >= 1, kernel odd, got ",
                stem_channels, ", ", mlp_ratio, ", ", kernel);
  MIXPREC_CHECK(adu_per_photon > 0 && std::isfinite(adu_per_photon),
                "[PeakNet] adu_per_photon must be > 0, got ", adu_per_photon);
  MIXPREC_CHECK(threshold > 0 && threshold < 1 && min_pixels >= 1 && small_peak_snr >= 0 &&
                    std::isfinite(small_peak_snr),
                "[PeakNet] threshold must be in (0, 1), min_pixels >= 1 and small_peak_snr >= 0, "
                "got ",
                threshold, ", ", min_pixels, " and ", small_peak_snr);
}

ConvNeXtBlock::ConvNeXtBlock(int64_t channels, int64_t mlp_ratio, int64_t kernel, Generator& gen) {
  depthwise_ = register_module(
      "depthwise", std::make_shared<nn::Conv2d>(
                       channels, channels, kernel,
                       Conv2dParams{.padding = kernel / 2, .groups = channels}, true, gen));
  norm_ = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{channels}, 1e-6));
  expand_ = register_module(
      "expand", std::make_shared<nn::Linear>(channels, mlp_ratio * channels, true, gen));
  grn_ = register_module("grn", std::make_shared<nn::GlobalResponseNorm>(mlp_ratio * channels));
  project_ = register_module(
      "project", std::make_shared<nn::Linear>(mlp_ratio * channels, channels, true, gen));
}

Tensor ConvNeXtBlock::forward(const Tensor& x) {
  const Tensor d = depthwise_->forward(x);
  const kernels::ConvNextMlpWeights w{norm_->weight(),   norm_->bias(),  norm_->eps(),
                                      expand_->weight(), expand_->bias(), grn_->gamma(),
                                      grn_->beta(),      grn_->eps(),    project_->weight(),
                                      project_->bias()};
  // Inference in a storage dtype (no gradient, no autocast): the per-pixel half in two passes
  // (kernels/convnext.h) instead of ten; the layers below otherwise (training, f64 checks).
  const DType dt = x.dtype();
  if (!autograd::needs_grad({&x, &d, &w.norm_weight, &w.norm_bias, &w.expand_weight,
                             &w.expand_bias, &w.grn_gamma, &w.grn_beta, &w.project_weight,
                             &w.project_bias}) &&
      !amp::autocast_enabled() && d.dtype() == dt &&
      (dt == DType::F32 || dt == DType::BF16 || dt == DType::F16)) {
    const Tensor residual = pixels_view(channels_last(x));
    const Tensor pixels = pixels_view(channels_last(d));
    const Tensor out = Tensor::empty(residual.shape(), dt);
    capture::launch("convnext_mlp", {&pixels, &residual}, {&out},
                    [w](const capture::KernelArgs& k) {
                      kernels::convnext_mlp(k.in(0), k.in(1), w, k.out(0));
                    });
    return channels_view(out);
  }
  Tensor h = norm_->forward(pixels_view(d));
  h = project_->forward(grn_->forward(gelu(expand_->forward(h))));
  return add(x, channels_view(h));
}

PeakNet::PeakNet(PeakNetConfig config, Generator& gen) : config_(std::move(config)) {
  config_.validate();
  const PeakNetConfig& c = config_;
  stem_ = register_module(
      "stem",
      std::make_shared<nn::Conv2d>(1, c.stem_channels, 3, Conv2dParams{.padding = 1}, true, gen));
  for (int64_t i = 0; i < c.levels(); ++i) {
    Level level;
    const std::string prefix = "level" + std::to_string(i) + ".";
    const int64_t in = i == 0 ? 1 : c.widths[static_cast<std::size_t>(i - 1)];
    const int64_t width = c.widths[static_cast<std::size_t>(i)];
    if (i > 0)
      level.norm =
          register_module(prefix + "norm", std::make_shared<nn::LayerNorm>(Shape{in}, 1e-6));
    level.down = register_module(
        prefix + "down",
        std::make_shared<nn::Conv2d>(in, width, 2, Conv2dParams{.stride = 2}, true, gen));
    for (int64_t b = 0; b < c.depths[static_cast<std::size_t>(i)]; ++b)
      level.blocks.push_back(
          register_module(prefix + "block" + std::to_string(b),
                          std::make_shared<ConvNeXtBlock>(width, c.mlp_ratio, c.kernel, gen)));
    if (i + 1 < c.levels()) {
      level.lateral =
          register_module(prefix + "lateral",
                          std::make_shared<nn::Conv2d>(c.widths[static_cast<std::size_t>(i + 1)],
                                                       width, 1, Conv2dParams{}, true, gen));
      level.decode = register_module(
          prefix + "decode", std::make_shared<ConvNeXtBlock>(width, c.mlp_ratio, c.kernel, gen));
    }
    levels_.push_back(std::move(level));
  }
  to_stem_ = register_module("to_stem", std::make_shared<nn::Conv2d>(c.widths[0], c.stem_channels,
                                                                     1, Conv2dParams{}, true, gen));
  head_ = register_module(
      "head", std::make_shared<nn::Conv2d>(c.stem_channels, 2, 1, Conv2dParams{}, true, gen));
  // Peaks are rare: start from a 1% prior for the peak class (RetinaNet's initialisation), so
  // the first steps are not spent unlearning a 50/50 guess on every background pixel.
  const NoGrad no_grad;
  Tensor bias = head_->bias();
  bias.data<float>()[0] = 0.0F;
  bias.data<float>()[1] = static_cast<float>(-std::log(99.0));
}

Tensor PeakNet::forward(const Tensor& frames) {
  const int64_t multiple = int64_t{1} << config_.levels();
  MIXPREC_CHECK(frames.dim() == 4 && frames.size(1) == 1 && frames.size(2) % multiple == 0 &&
                    frames.size(3) % multiple == 0,
                "[PeakNet] expected frames [B, 1, H, W] with H and W multiples of ", multiple,
                ", got ", shape_to_string(frames.shape()));
  const DType dt = frames.dtype();
  // Photons on a log scale: spots and background span four decades of ADU.
  // Channels-last from the start: for one channel the same bytes, viewed with channels-last
  // strides, so every op after it (the stem and the first downsampling included) writes
  // channels-last outputs directly instead of NCHW ones copied over.
  const Tensor nhwc = frames.contiguous()
                          .view({frames.size(0), frames.size(2), frames.size(3), 1})
                          .permute({0, 3, 1, 2});
  const Tensor x =
      log(add(mul(relu(nhwc), 1.0 / config_.adu_per_photon), Tensor::scalar(1.0, dt)));
  std::vector<Tensor> skips;
  Tensor h = x;
  for (Level& level : levels_) {
    h = level.down->forward(level.norm ? channel_norm(*level.norm, h) : h);
    for (auto& block : level.blocks) h = block->forward(h);
    skips.push_back(h);
  }
  for (int64_t i = config_.levels() - 2; i >= 0; --i) {
    Level& level = levels_[static_cast<std::size_t>(i)];
    h = level.decode->forward(
        add(up2(level.lateral->forward(h)), skips[static_cast<std::size_t>(i)]));
  }
  // The decoder's features back at full resolution, added to the stem's in its convolution's
  // epilogue.
  return head_->forward(gelu(stem_->forward(x, up2(to_stem_->forward(h)))));
}

int64_t PeakNet::multiply_adds(int64_t height, int64_t width) const {
  const PeakNetConfig& c = config_;
  auto block = [&](int64_t ch) { return ch * c.kernel * c.kernel + 2 * ch * c.mlp_ratio * ch; };
  int64_t total = height * width * (9 * c.stem_channels + 2 * c.stem_channels);  // stem, head
  for (int64_t i = 0; i < c.levels(); ++i) {
    const int64_t pixels = (height >> (i + 1)) * (width >> (i + 1));
    const int64_t in = i == 0 ? 1 : c.widths[static_cast<std::size_t>(i - 1)];
    const int64_t w = c.widths[static_cast<std::size_t>(i)];
    total += pixels * (4 * in * w + c.depths[static_cast<std::size_t>(i)] * block(w));
    if (i + 1 < c.levels())  // the lateral conv runs at the level below's resolution
      total += pixels / 4 * c.widths[static_cast<std::size_t>(i + 1)] * w + pixels * block(w);
  }
  return total + (height / 2) * (width / 2) * c.widths[0] * c.stem_channels;  // to_stem
}

void PeakNet::segment(const Tensor& frames, uint8_t* mask) {
  // A batch runs frame by frame, frames side by side on the threads, each frame's whole forward
  // on one thread (the ops inside run inline), instead of every op split across the threads. At
  // this network's size an op split in two costs a barrier and both cores' caches each; a frame
  // per thread keeps its activations (a few MiB) in one core's cache. On one thread too: 16
  // frames in one forward took 6.4 ms a frame against 5.4 frame by frame (their activations
  // spill from the L3). Masks are the same either way.
  const int64_t b = frames.size(0);
  if (b > 1 && !in_parallel_region()) {
    MIXPREC_CHECK(frames.dim() == 4, "[PeakNet] expected frames [B, 1, H, W], got ",
                  shape_to_string(frames.shape()));
    const int64_t per_frame = frames.numel() / b;
    const bool autocast = amp::autocast_enabled();  // thread-local: carried into the workers
    const DType autocast_dtype = amp::autocast_dtype();
    parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
      const amp::Autocast scope(autocast_dtype, autocast);
      for (int64_t i = lo; i < hi; ++i) segment(frames.narrow(0, i, 1), mask + i * per_frame);
    });
    return;
  }
  const InferenceMode inference;
  peak_mask(forward(frames), config_.threshold, mask);
}

void peak_mask(const Tensor& logits, double threshold, uint8_t* mask) {
  MIXPREC_CHECK(logits.dim() == 4 && logits.size(1) == 2,
                "[peak_mask] expected logits [B, 2, H, W], got ", shape_to_string(logits.shape()));
  // Of two classes, the peak probability exceeds p where the peak logit exceeds the
  // background's by log(p / (1 - p)): 0 at p = 0.5. Channels-last logits are a (background,
  // peak) pair per pixel, widened exactly to f32.
  const auto margin = static_cast<float>(std::log(threshold / (1 - threshold)));
  const Tensor pairs = logits.to(DType::F32).contiguous(MemoryFormat::ChannelsLast);
  const float* pair = pairs.data<float>();
  parallel_for(0, pairs.numel() / 2, 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) mask[i] = pair[2 * i + 1] > pair[2 * i] + margin ? 1 : 0;
  });
}

void PeakNet::set_peak_rule(double threshold, int64_t min_pixels, double small_peak_snr) {
  PeakNetConfig c = config_;
  c.threshold = threshold;
  c.min_pixels = min_pixels;
  c.small_peak_snr = small_peak_snr;
  c.validate();
  config_ = c;
}

Tensor focal_loss(const Tensor& logits, const Tensor& target, const Tensor& weight,
                  const FocalLossOptions& options) {
  MIXPREC_CHECK(logits.dim() == 4 && logits.size(1) == 2,
                "[focal_loss] expected logits [B, 2, H, W], got ", shape_to_string(logits.shape()));
  const Shape pixels = {logits.size(0), logits.size(2), logits.size(3)};
  MIXPREC_CHECK(target.shape() == pixels && (!weight.defined() || weight.shape() == pixels),
                "[focal_loss] target and weight must be ", shape_to_string(pixels), ", got ",
                shape_to_string(target.shape()), " and ",
                weight.defined() ? shape_to_string(weight.shape()) : "none");
  MIXPREC_CHECK(options.alpha >= 0 && options.alpha <= 1 && options.gamma >= 0,
                "[focal_loss] expected alpha in [0, 1] and gamma >= 0, got ", options.alpha, ", ",
                options.gamma);
  const DType dt = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor log_p = log_softmax(pixels_view(logits.to(dt)), 3);  // [B, H, W, 2]
  const Tensor t = target.to(dt).detach();
  const Tensor log_p0 = log_p.select(3, 0);
  const Tensor log_pt =
      add(log_p0, mul(t, sub(log_p.select(3, 1), log_p0)));  // log p of the true class
  Tensor per_pixel = log_pt;
  if (options.gamma != 0) {
    // 1 - p_t >= 0 in exact arithmetic; the clamp keeps a rounding below zero from pow.
    const Tensor miss = clamp(sub(Tensor::scalar(1.0, dt), exp(log_pt)), 0.0, 1.0);
    per_pixel = mul(per_pixel, pow(miss, options.gamma));
  }
  // -a_t: alpha for a peak pixel, 1 - alpha for background; times the weight.
  Tensor scale = add(mul(t, -(2 * options.alpha - 1)), Tensor::scalar(-(1 - options.alpha), dt));
  if (weight.defined()) scale = mul(scale, weight.to(dt).detach());
  const Tensor positives = weight.defined() ? sum(mul(t, weight.to(dt))) : sum(t);
  const double count = std::max(1.0, positives.to(DType::F64).item<double>());
  return mul(sum(mul(per_pixel, scale)), 1.0 / count);
}

void peak_labels(const stream::SyntheticFrame& frame, const stream::DetectorGeometry& geometry,
                 float* target, float* weight, const PeakLabelOptions& options) {
  const int64_t rows = geometry.rows, cols = geometry.cols;
  const auto n = static_cast<std::size_t>(geometry.panels * rows * cols);
  std::fill(target, target + n, 0.0F);
  std::fill(weight, weight + n, 1.0F);
  for (const stream::TruePeak& s : frame.peaks) {
    const bool wanted = s.snr >= options.min_snr;
    const double reach = options.reach_sigma * s.sigma;
    // Around a weak spot a wider don't-care disc: its tails are neither peak nor clean background.
    const double extent = wanted ? reach : reach + 1;
    const int64_t r0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(s.y - extent)));
    const int64_t r1 = std::min<int64_t>(rows - 1, static_cast<int64_t>(std::ceil(s.y + extent)));
    const int64_t c0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(s.x - extent)));
    const int64_t c1 = std::min<int64_t>(cols - 1, static_cast<int64_t>(std::ceil(s.x + extent)));
    for (int64_t r = r0; r <= r1; ++r)
      for (int64_t c = c0; c <= c1; ++c) {
        if (std::hypot(static_cast<double>(c) - s.x, static_cast<double>(r) - s.y) > extent)
          continue;
        const auto i = static_cast<std::size_t>((s.panel * rows + r) * cols + c);
        if (wanted)
          target[i] = 1.0F, weight[i] = 1.0F;
        else if (target[i] == 0.0F)
          weight[i] = 0.0F;
      }
  }
}

io::SafetensorsMetadata peaknet_metadata(const PeakNetConfig& c) {
  return {{"format", kFormat},
          {"peaknet.widths", detail::join_ints(c.widths)},
          {"peaknet.depths", detail::join_ints(c.depths)},
          {"peaknet.stem_channels", std::to_string(c.stem_channels)},
          {"peaknet.mlp_ratio", std::to_string(c.mlp_ratio)},
          {"peaknet.kernel", std::to_string(c.kernel)},
          {"peaknet.adu_per_photon", io::json_number(c.adu_per_photon, 17)},
          {"peaknet.threshold", io::json_number(c.threshold, 17)},
          {"peaknet.min_pixels", std::to_string(c.min_pixels)},
          {"peaknet.small_peak_snr", io::json_number(c.small_peak_snr, 17)}};
}

PeakNetConfig peaknet_config(const io::SafetensorsMetadata& m, const std::string& path) {
  constexpr std::string_view kWriter = "mixprec stream train";
  auto get = [&](const std::string& key) -> const std::string& {
    return detail::required_field("peaknet", path, m, key, kWriter);
  };
  detail::check_format("peaknet", path, m, kFormat, kWriter);
  PeakNetConfig c;
  auto list = [&](const char* key) {
    return detail::parse_int_list_field("peaknet", path, key, get(key));
  };
  auto integer = [&](const char* key) {
    return detail::parse_int_field("peaknet", path, key, get(key));
  };
  c.widths = list("peaknet.widths");
  c.depths = list("peaknet.depths");
  c.stem_channels = integer("peaknet.stem_channels");
  c.mlp_ratio = integer("peaknet.mlp_ratio");
  c.kernel = integer("peaknet.kernel");
  auto number = [&](const char* key, const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    MIXPREC_CHECK(end != text.c_str() && *end == '\0', "[peaknet] ", path, ": metadata ", key,
                  " = '", text, "' is not a number");
    return v;
  };
  c.adu_per_photon = number("peaknet.adu_per_photon", get("peaknet.adu_per_photon"));
  // Files from before calibration have no peak rule: the argmax, every component a peak.
  if (const auto it = m.find("peaknet.threshold"); it != m.end())
    c.threshold = number("peaknet.threshold", it->second);
  if (m.count("peaknet.min_pixels") != 0) c.min_pixels = integer("peaknet.min_pixels");
  if (const auto it = m.find("peaknet.small_peak_snr"); it != m.end())  // since session 22
    c.small_peak_snr = number("peaknet.small_peak_snr", it->second);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("[peaknet] " + path + ": " + e.what());
  }
  return c;
}

void save_peaknet(const std::string& path, const PeakNet& model,
                  const io::SafetensorsMetadata& extra) {
  io::SafetensorsMetadata m = extra;
  for (auto& [key, value] : peaknet_metadata(model.config())) m[key] = value;
  io::save_module(model, path, m);
}

std::unique_ptr<PeakNet> load_peaknet(const std::string& path, io::SafetensorsMetadata* extra) {
  const io::SafetensorsMetadata m = io::SafetensorsFile::open(path).metadata();
  auto model = std::make_unique<PeakNet>(peaknet_config(m, path));
  io::load_module(*model, path);
  if (extra != nullptr) {
    extra->clear();
    for (const auto& [key, value] : m)
      if (key != "format" && key.rfind("peaknet.", 0) != 0) (*extra)[key] = value;
  }
  return model;
}

}  // namespace mixprec::models
