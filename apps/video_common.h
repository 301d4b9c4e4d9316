#pragma once
// What the video commands share: where the shipped model lives, how a --precision name turns
// into an inference setup, and run statistics.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/amp/precision_config.h"
#include "mixprec/core/dtype.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"

namespace mixprec::app {

// The trained lightweight model shipped in the repository (made by `make video-model`).
std::string default_video_model_path();

// How a video model runs: its weights' dtype, and whether f32 weights run under autocast.
struct InferencePrecision {
  std::string name;            // fp32 | fp16 | bf16 | autocast-bf16 | autocast-fp16
  DType weights = DType::F32;  // true half precision converts the weights (norms stay f32)
  bool autocast = false;       // f32 weights, 16-bit compute per op
  DType autocast_dtype = DType::BF16;
  std::shared_ptr<const amp::PrecisionPlan> plan;  // plan:FILE: per-module weight dtypes
};
// fp32 | fp16 | bf16 | autocast-bf16 | autocast-fp16 | auto (the precision probe's dtype) |
// plan:FILE (a per-layer plan, applied by nn::to_precision).
InferencePrecision parse_inference_precision(const std::string& name);
void apply_precision(models::UNetVideo& model, const InferencePrecision& p);

// Latency percentiles (nearest rank) of a sample, in the sample's unit.
double percentile(std::vector<double> values, double p);
double median(const std::vector<double>& values);

// The process's peak resident set size, bytes (getrusage).
std::size_t peak_rss_bytes();

// The model file's dataset and recommended stream settings (models/video_model_file.h).
using models::stream_options;
using models::stream_setting;
using models::StreamRequest;
using models::training_dataset;

// How a stream makes a frame, for progress lines: "4 DDIM steps" or "direct (1 forward)".
std::string sampler_text(const models::StreamOptions& options);

// Mean structural similarity (Gaussian 11x11 window, sigma 1.5, on [0, 1] values, per channel).
double ssim(const Tensor& a, const Tensor& b);

}  // namespace mixprec::app
