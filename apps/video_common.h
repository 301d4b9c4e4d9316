#pragma once
// What the video commands share: where the shipped model lives, how a --precision name turns
// into an inference setup, and run statistics.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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
};
// fp32 | fp16 | bf16 | autocast-bf16 | autocast-fp16 | auto (this CPU's recommended dtype).
InferencePrecision parse_inference_precision(const std::string& name);
void apply_precision(models::UNetVideo& model, const InferencePrecision& p);

// Latency percentiles (nearest rank) of a sample, in the sample's unit.
double percentile(std::vector<double> values, double p);
double median(const std::vector<double>& values);

// The process's peak resident set size, bytes (getrusage).
std::size_t peak_rss_bytes();

// The dataset a model file was trained on (its `seed` and `size` metadata): the real frames
// that start its streams and that the quality report compares them with. A file without them
// is an Error naming the file and the field.
data::MovingShapes training_dataset(const models::VideoModelInfo& info, const std::string& path);

// A stream setting in [0, 1] (`key`: stream_context_noise, stream_still_threshold): `requested`
// when the user gave one (not NaN), else the value the model file recommends (written by
// `video train --stream-context-noise / --stream-still-threshold`), else 0.
double stream_setting(const models::VideoModelInfo& info, const std::string& path,
                      const std::string& key, double requested);
// A stream of the model in `path` as the user asked for it: DDIM steps (1 for a direct
// predictor, which runs one forward whatever is asked), noise seed, and the context noise and
// still threshold through stream_setting (NaN: the model file's).
struct StreamRequest {
  int64_t steps = 4;
  int64_t seed = 0;
  double context_noise = std::nan("");
  double still_threshold = std::nan("");
};
models::StreamOptions stream_options(const models::VideoModelInfo& info, const std::string& path,
                                     const StreamRequest& request);
// How a stream makes a frame, for progress lines: "4 DDIM steps" or "direct (1 forward)".
std::string sampler_text(const models::StreamOptions& options);

// Mean structural similarity (Gaussian 11x11 window, sigma 1.5, on [0, 1] values, per channel).
double ssim(const Tensor& a, const Tensor& b);

}  // namespace mixprec::app
