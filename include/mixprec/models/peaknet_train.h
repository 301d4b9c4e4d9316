#pragma once
// Training PeakNet on synthetic detector frames, and PeakNet as a peak finder (issue #13;
// docs/STREAM.md). `mixprec stream train` drives PeakNetTrainer; `stream run --finder net`
// and `bench stream` use PeakNetFinder.
#include <cstdint>
#include <memory>
#include <vector>

#include "mixprec/models/peaknet.h"
#include "mixprec/optim/adam.h"
#include "mixprec/stream/peak_matching.h"
#include "mixprec/stream/peaks.h"
#include "mixprec/stream/synthetic_frames.h"

namespace mixprec::models {

struct PeakNetTrainOptions {
  std::string detector = "single";  // the synthetic detector whose panels are the data
  uint64_t seed = 1;                // data: detectors seed .. seed + kDetectors - 1 take turns
  int64_t batch = 8;                // crops per step
  int64_t crop = 128;               // crop side, pixels (a multiple of 2^levels)
  int64_t crops_per_frame = 4;      // crops cut from each generated panel
  double lr = 2e-3;                 // peak of the warmup-cosine schedule (AdamW)
  double min_lr = 1e-4;
  int64_t warmup = 50;
  int64_t steps = 2000;  // the schedule's length
  double weight_decay = 0.05;
  DType compute = DType::BF16;  // autocast dtype; F32 trains without autocast
  FocalLossOptions focal;
  PeakLabelOptions labels;
  static constexpr int64_t kDetectors = 4;  // distinct bad-pixel maps in the training data
  void validate(const PeakNetConfig& config) const;
};

// One step at a time, deterministic: step s draws frames s * F .. (s + 1) * F - 1 (F = batch /
// crops_per_frame, rounded up) and its crops from a generator seeded by (seed, s), so a run
// resumed at step s continues with exactly the batches it would have seen.
class PeakNetTrainer {
 public:
  PeakNetTrainer(PeakNet& model, PeakNetTrainOptions options);
  // One optimizer step on the next batch; returns the batch's loss.
  double step();
  int64_t steps_done() const { return step_; }
  void set_steps_done(int64_t step) { step_ = step; }  // after loading a checkpoint
  optim::AdamW& optimizer() { return *optimizer_; }
  const PeakNetTrainOptions& options() const { return options_; }

 private:
  void fill_batch(Tensor& frames, Tensor& target, Tensor& weight);

  PeakNet& model_;
  PeakNetTrainOptions options_;
  std::vector<stream::SyntheticDetector> detectors_;
  std::unique_ptr<optim::AdamW> optimizer_;
  stream::SyntheticFrame frame_;
  std::vector<float> target_, weight_;  // one panel's labels
  int64_t step_ = 0;
};

// PeakNet as a peak finder: a batch of frames [B, P, H, W] in the model's dtype (bf16 at the
// source) -> argmax masks -> 8-connected components per panel -> centre of mass, background-
// subtracted intensity, pixel count (stream::extract_peaks) -> one peak list per frame. The
// panels of the batch run through the network as one batch of B * P single-panel images.
// `mode`: how it computes: F32 or BF16 (the weights and frames in that dtype) or autocast-bf16
// (f32 weights and frames, matrix products in bf16).
enum class NetPrecision { F32, BF16, F16, AutocastBF16 };
NetPrecision parse_net_precision(const std::string& name);  // fp32 | bf16 | fp16 | autocast-bf16
const char* net_precision_name(NetPrecision precision);
DType net_input_dtype(NetPrecision precision);  // the dtype frames are converted into

class PeakNetFinder {
 public:
  // The model's peak rule decides options.min_pixels (PeakNet::set_peak_rule changes it).
  PeakNetFinder(PeakNet& model, NetPrecision precision, stream::DetectorGeometry geometry,
                std::vector<uint8_t> bad_pixels, stream::MaskPeakOptions options = {});
  DType input_dtype() const { return net_input_dtype(precision_); }
  // frames [B, P, H, W] (contiguous, input_dtype()) -> B peak lists.
  std::vector<std::vector<stream::Peak>> find(const Tensor& frames);
  // The masks of the last find(), (B, P, H, W).
  const std::vector<uint8_t>& last_masks() const { return masks_; }

 private:
  PeakNet& model_;
  NetPrecision precision_;
  stream::DetectorGeometry geometry_;
  std::vector<uint8_t> bad_pixels_;
  stream::MaskPeakOptions options_;
  std::vector<uint8_t> masks_;
  std::vector<float> values_;  // one frame widened to f32 for the measurement (exact)
};

// The network's peaks on frames first .. first + count - 1 of `detector`, scored against their
// truth (stream::match_peaks within `match_radius` px, true spots below `min_truth_snr` don't
// care), with the model's peak rule (its min_pixels replaces options.min_pixels). Runs the model as it is (its dtype, no gradients; f32 frames unless the model is
// 16-bit, then frames in its dtype); for training-time validation on held-out frames.
stream::MatchCounts evaluate_peaknet(PeakNet& model, const stream::SyntheticDetector& detector,
                                     int64_t first, int64_t count, double match_radius = 1.5,
                                     double min_truth_snr = 8,
                                     const stream::MaskPeakOptions& options = {});

// The peak rule (PeakNetConfig::threshold, min_pixels and small_peak_snr) with the best F1 on
// frames first .. first + count - 1 of `detector`, scored as evaluate_peaknet does: thresholds
// 0.05, 0.10 .. 0.70 times min_pixels 1 .. 4 times kSmallPeakSnrs (a tie goes to the threshold
// nearest 0.5, the argmax, then to fewer pixels, then to no or the lowest small-peak SNR).
// Leaves the model's rule as it found it; `scores` (optional) receives each candidate's counts.
struct PeakRuleScore {
  double threshold;
  int64_t min_pixels;
  double small_peak_snr;
  stream::MatchCounts counts;
};
// The small-peak SNRs calibration tries with each min_pixels above 1 (0: no exception).
inline constexpr double kSmallPeakSnrs[] = {0, 4, 6, 8, 12};
PeakRuleScore calibrate_peak_rule(PeakNet& model, const stream::SyntheticDetector& detector,
                                  int64_t first, int64_t count, double match_radius = 1.5,
                                  double min_truth_snr = 8,
                                  std::vector<PeakRuleScore>* scores = nullptr);

}  // namespace mixprec::models
