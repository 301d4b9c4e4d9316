#include "mixprec/models/peaknet_train.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "mixprec/core/error.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/optim/lr_schedule.h"
#include "mixprec/stream/sample_types.h"

namespace mixprec::models {

void PeakNetTrainOptions::validate(const PeakNetConfig& config) const {
  const int64_t multiple = int64_t{1} << config.levels();
  const stream::DetectorGeometry g = stream::detector_geometry(detector);
  MIXPREC_CHECK(crop >= multiple && crop % multiple == 0 && crop <= g.rows && crop <= g.cols,
                "[peaknet train] the crop (", crop, ") must be a multiple of ", multiple,
                " no larger than a panel (", g.rows, " x ", g.cols, ")");
  MIXPREC_CHECK(batch >= 1 && crops_per_frame >= 1 && steps >= 1 && warmup >= 0,
                "[peaknet train] batch, crops per frame and steps must be >= 1, warmup >= 0");
  MIXPREC_CHECK(lr > 0 && min_lr >= 0 && min_lr <= lr && weight_decay >= 0,
                "[peaknet train] expected lr > 0, 0 <= min_lr <= lr, weight_decay >= 0");
  MIXPREC_CHECK(compute == DType::F32 || compute == DType::BF16 || compute == DType::F16,
                "[peaknet train] compute must be f32, bf16 or f16");
}

PeakNetTrainer::PeakNetTrainer(PeakNet& model, PeakNetTrainOptions options)
    : model_(model), options_(std::move(options)) {
  options_.validate(model.config());
  const stream::DetectorGeometry geometry = stream::detector_geometry(options_.detector);
  for (int64_t d = 0; d < PeakNetTrainOptions::kDetectors; ++d)
    detectors_.emplace_back(geometry, stream::SyntheticConfig{},
                            options_.seed + static_cast<uint64_t>(d));
  optimizer_ = std::make_unique<optim::AdamW>(
      model.parameters(),
      optim::AdamWOptions{.lr = options_.lr, .weight_decay = options_.weight_decay});
  const auto panel = static_cast<std::size_t>(geometry.rows * geometry.cols);
  target_.resize(panel);
  weight_.resize(panel);
}

void PeakNetTrainer::fill_batch(Tensor& frames, Tensor& target, Tensor& weight) {
  const int64_t b = options_.batch, side = options_.crop;
  const int64_t frames_per_step = (b + options_.crops_per_frame - 1) / options_.crops_per_frame;
  const stream::DetectorGeometry& g = detectors_.front().geometry();
  frames = Tensor::empty({b, 1, side, side});
  target = Tensor::empty({b, side, side});
  weight = Tensor::empty({b, side, side});
  Generator gen(options_.seed * 1000003 + static_cast<uint64_t>(step_));
  int64_t panel = 0;
  for (int64_t i = 0; i < b; ++i) {
    if (i % options_.crops_per_frame == 0) {
      // A new frame (and on it a random panel); frames take turns among the detectors.
      const int64_t index = step_ * frames_per_step + i / options_.crops_per_frame;
      const stream::SyntheticDetector& det =
          detectors_[static_cast<std::size_t>(index % PeakNetTrainOptions::kDetectors)];
      det.generate(index, frame_);
      panel = static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(g.panels));
      std::vector<float> target_all(frame_.adu.size()), weight_all(frame_.adu.size());
      peak_labels(frame_, g, target_all.data(), weight_all.data(), options_.labels);
      const auto offset = static_cast<std::ptrdiff_t>(panel * g.rows * g.cols);
      std::copy_n(target_all.begin() + offset, target_.size(), target_.begin());
      std::copy_n(weight_all.begin() + offset, weight_.size(), weight_.begin());
    }
    const int64_t r0 =
        static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(g.rows - side + 1));
    const int64_t c0 =
        static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(g.cols - side + 1));
    float* f = frames.data<float>() + i * side * side;
    float* t = target.data<float>() + i * side * side;
    float* w = weight.data<float>() + i * side * side;
    for (int64_t r = 0; r < side; ++r) {
      const int64_t src = (panel * g.rows + r0 + r) * g.cols + c0;
      const auto dst = static_cast<std::size_t>(r * side);
      for (int64_t c = 0; c < side; ++c)
        f[dst + static_cast<std::size_t>(c)] = frame_.adu[static_cast<std::size_t>(src + c)];
      std::memcpy(t + dst, target_.data() + (r0 + r) * g.cols + c0,
                  static_cast<std::size_t>(side) * sizeof(float));
      std::memcpy(w + dst, weight_.data() + (r0 + r) * g.cols + c0,
                  static_cast<std::size_t>(side) * sizeof(float));
    }
  }
}

double PeakNetTrainer::step() {
  Tensor frames, target, weight;
  fill_batch(frames, target, weight);
  optimizer_->set_lr(optim::warmup_cosine_lr(options_.lr, step_, options_.warmup, options_.steps,
                                             options_.min_lr / options_.lr));
  model_.train();
  Tensor loss;
  {
    const amp::Autocast autocast(options_.compute == DType::F32 ? DType::BF16 : options_.compute,
                                 options_.compute != DType::F32);
    loss = focal_loss(model_.forward(frames), target, weight, options_.focal);
  }
  optimizer_->zero_grad();
  loss.backward();
  optimizer_->step();
  ++step_;
  return loss.item<double>();
}

namespace {

// Each precision's name and the dtype frames are converted into, in NetPrecision order.
struct NetPrecisionInfo {
  NetPrecision precision;
  const char* name;
  DType input_dtype;
};
constexpr NetPrecisionInfo kNetPrecisions[] = {
    {NetPrecision::F32, "fp32", DType::F32},
    {NetPrecision::BF16, "bf16", DType::BF16},
    {NetPrecision::F16, "fp16", DType::F16},
    {NetPrecision::AutocastBF16, "autocast-bf16", DType::F32},
};

const NetPrecisionInfo& net_precision_info(NetPrecision precision) {
  const auto index = static_cast<std::size_t>(precision);
  MIXPREC_ASSERT(index < std::size(kNetPrecisions) && kNetPrecisions[index].precision == precision);
  return kNetPrecisions[index];
}

}  // namespace

NetPrecision parse_net_precision(const std::string& name) {
  for (const NetPrecisionInfo& p : kNetPrecisions)
    if (name == p.name) return p.precision;
  throw Error("precision must be fp32, bf16, fp16 or autocast-bf16, got '" + name + "'");
}

const char* net_precision_name(NetPrecision precision) {
  return net_precision_info(precision).name;
}

DType net_input_dtype(NetPrecision precision) { return net_precision_info(precision).input_dtype; }

PeakNetFinder::PeakNetFinder(PeakNet& model, NetPrecision precision,
                             stream::DetectorGeometry geometry, std::vector<uint8_t> bad_pixels,
                             stream::MaskPeakOptions options)
    : model_(model),
      precision_(precision),
      geometry_(std::move(geometry)),
      bad_pixels_(std::move(bad_pixels)),
      options_(options) {
  options_.min_pixels = model.config().min_pixels;
  options_.small_peak_snr = model.config().small_peak_snr;
  const int64_t multiple = int64_t{1} << model.config().levels();
  MIXPREC_CHECK(geometry_.rows % multiple == 0 && geometry_.cols % multiple == 0,
                "[peaknet] panels of ", geometry_.rows, " x ", geometry_.cols,
                " are not multiples of ", multiple, " (the network's ", model.config().levels(),
                " levels)");
  model_.eval();
  model_.to(input_dtype());
}

std::vector<std::vector<stream::Peak>> PeakNetFinder::find(const Tensor& frames) {
  const stream::DetectorGeometry& g = geometry_;
  MIXPREC_CHECK(frames.dim() == 4 && frames.size(1) == g.panels && frames.size(2) == g.rows &&
                    frames.size(3) == g.cols && frames.dtype() == input_dtype() &&
                    frames.is_contiguous(),
                "[peaknet] expected contiguous frames [B, ", g.panels, ", ", g.rows, ", ", g.cols,
                "] of ", dtype_name(input_dtype()), ", got ", shape_to_string(frames.shape()), " ",
                dtype_name(frames.dtype()));
  const int64_t b = frames.size(0), per_frame = g.panels * g.rows * g.cols;
  masks_.resize(static_cast<std::size_t>(b * per_frame));
  {
    const amp::Autocast autocast(DType::BF16, precision_ == NetPrecision::AutocastBF16);
    model_.segment(frames.view({b * g.panels, 1, g.rows, g.cols}), masks_.data());
  }
  // The measurement reads the frame as the network saw it, widened to f32 (exactly).
  values_.resize(static_cast<std::size_t>(per_frame));
  std::vector<std::vector<stream::Peak>> peaks;
  for (int64_t i = 0; i < b; ++i) {
    kernels::convert(static_cast<const std::byte*>(frames.data_ptr()) +
                         i * per_frame * dtype_size(frames.dtype()),
                     frames.dtype(), values_.data(), DType::F32,
                     static_cast<std::size_t>(per_frame));
    peaks.push_back(stream::extract_peaks(
        {values_.data(), g.panels, g.rows, g.cols}, masks_.data() + i * per_frame,
        bad_pixels_.empty() ? nullptr : bad_pixels_.data(), options_));
  }
  return peaks;
}

namespace {

struct PeakRule {
  double threshold;
  int64_t min_pixels;
  double small_peak_snr;
};

// Each rule's counts on frames first .. first + count - 1 of `detector`: one forward a frame,
// then a mask per threshold (rules sharing one in a row share the mask) and an extraction per
// rule. Runs the model as it is (its dtype, no gradients).
std::vector<stream::MatchCounts> score_rules(PeakNet& model,
                                             const stream::SyntheticDetector& detector,
                                             int64_t first, int64_t count, double match_radius,
                                             double min_truth_snr,
                                             const std::vector<PeakRule>& rules,
                                             stream::MaskPeakOptions options) {
  const stream::DetectorGeometry& g = detector.geometry();
  const bool was_training = model.training();
  model.eval();
  const DType dtype = model.parameters().front().dtype();
  const int64_t n = g.panels * g.rows * g.cols;
  stream::SyntheticFrame frame;
  std::vector<float> values(static_cast<std::size_t>(n));
  std::vector<uint8_t> mask(static_cast<std::size_t>(n));
  std::vector<stream::MatchCounts> counts(rules.size());
  for (int64_t i = first; i < first + count; ++i) {
    detector.generate(i, frame);
    Tensor frames = Tensor::empty({g.panels, 1, g.rows, g.cols}, dtype);
    stream::convert_samples(frame.adu.data(), stream::SampleType::U16, frames.data_ptr(), dtype,
                            static_cast<std::size_t>(n));
    Tensor logits;
    {
      const InferenceMode inference;
      logits = model.forward(frames);
    }
    kernels::convert(frames.data_ptr(), dtype, values.data(), DType::F32,
                     static_cast<std::size_t>(n));
    for (std::size_t r = 0; r < rules.size(); ++r) {
      if (r == 0 || rules[r].threshold != rules[r - 1].threshold)
        peak_mask(logits, rules[r].threshold, mask.data());
      options.min_pixels = rules[r].min_pixels;
      options.small_peak_snr = rules[r].small_peak_snr;
      const std::vector<stream::Peak> peaks =
          stream::extract_peaks({values.data(), g.panels, g.rows, g.cols}, mask.data(),
                                detector.bad_pixel_mask().data(), options);
      counts[r] += stream::match_peaks(peaks, frame.peaks, match_radius, min_truth_snr);
    }
  }
  model.train(was_training);
  return counts;
}

}  // namespace

stream::MatchCounts evaluate_peaknet(PeakNet& model, const stream::SyntheticDetector& detector,
                                     int64_t first, int64_t count, double match_radius,
                                     double min_truth_snr, const stream::MaskPeakOptions& options) {
  const PeakNetConfig& c = model.config();
  const PeakRule rule{c.threshold, c.min_pixels, c.small_peak_snr};
  return score_rules(model, detector, first, count, match_radius, min_truth_snr, {rule},
                     options)[0];
}

PeakRuleScore calibrate_peak_rule(PeakNet& model, const stream::SyntheticDetector& detector,
                                  int64_t first, int64_t count, double match_radius,
                                  double min_truth_snr, std::vector<PeakRuleScore>* scores) {
  std::vector<PeakRule> rules;
  for (int i = 1; i <= 14; ++i)
    for (int64_t pixels = 1; pixels <= 4; ++pixels)
      for (const double snr : kSmallPeakSnrs)
        if (pixels > 1 || snr == 0) rules.push_back({0.05 * i, pixels, snr});
  const std::vector<stream::MatchCounts> counts =
      score_rules(model, detector, first, count, match_radius, min_truth_snr, rules, {});
  PeakRuleScore best{0.5, 1, 0, {}};
  double best_f1 = -1;
  for (std::size_t r = 0; r < rules.size(); ++r) {
    const PeakRuleScore s{rules[r].threshold, rules[r].min_pixels, rules[r].small_peak_snr,
                          counts[r]};
    if (scores != nullptr) scores->push_back(s);
    // Candidates come in order of threshold, pixels, then small-peak SNR (none first): a tie
    // keeps the one nearer 0.5, and of those the first.
    if (s.counts.f1() > best_f1 ||
        (s.counts.f1() == best_f1 && std::abs(s.threshold - 0.5) < std::abs(best.threshold - 0.5)))
      best = s, best_f1 = s.counts.f1();
  }
  return best;
}

}  // namespace mixprec::models
