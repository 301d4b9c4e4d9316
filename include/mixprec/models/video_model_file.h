#pragma once
// A trained video model on disk: the UNetVideo weights in one safetensors file whose metadata
// says how to rebuild and drive the network (architecture, prediction, schedule), so
// `mixprec video generate --checkpoint FILE` needs nothing else.
//
//   __metadata__  "format"                  "mixprec.video_model"
//                 "unet.<field>"            every UNetVideoConfig field (lists comma-separated)
//                 "diffusion.prediction"    "v" | "eps"
//                 "diffusion.steps"         the schedule's length (cosine)
//                 anything else             the caller's (training command, seed, steps, ...)
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/amp/precision_plan.h"
#include "mixprec/models/video_streams.h"

namespace mixprec::models {

struct VideoModelInfo {
  UNetVideoConfig config;
  Prediction prediction = Prediction::V;
  int64_t schedule_steps = 1000;
  bool residual = false;  // the network denoises the change from the last context frame
  io::SafetensorsMetadata extra{};  // the caller's own metadata
};

// Writes the weights (in their own dtype) and `info` atomically.
void save_video_model(const std::string& path, const UNetVideo& model, const VideoModelInfo& info);

// Reads `path`, rebuilds the network it describes and loads its weights (f32 parameters,
// converted exactly from whatever dtype the file holds). Errors name the file and the problem.
std::unique_ptr<UNetVideo> load_video_model(const std::string& path, VideoModelInfo* info);

// The dataset a model file was trained on (its `seed` and `size` metadata): the real frames
// that start its streams and that the quality report compares them with. A file without them
// is an Error naming the file and the field.
data::MovingShapes training_dataset(const VideoModelInfo& info, const std::string& path);

// A stream setting in [0, 1] (`key`: stream_context_noise, stream_still_threshold): `requested`
// when the user gave one (not NaN), else the value the model file recommends (written by
// `video train --stream-context-noise / --stream-still-threshold`), else 0.
double stream_setting(const VideoModelInfo& info, const std::string& path, const std::string& key,
                      double requested);

// The restorer in `path` (written by `video train --restorer`), its weights converted to
// `weights`: StreamOptions::restorer. A model file that is not a restorer is an Error naming it.
std::unique_ptr<UNetVideo> load_restorer(const std::string& path, DType weights = DType::F32);

// A stream of the model in `path` as the user asked for it: DDIM steps (1 for a direct
// predictor, which runs one forward whatever is asked), noise seed, and the context noise and
// still threshold through stream_setting (NaN: the model file's).
struct StreamRequest {
  int64_t steps = 4;
  int64_t seed = 0;
  double context_noise = std::nan("");
  double still_threshold = std::nan("");
  bool graph = false;  // StreamOptions::graph
  std::string restorer{};  // a restorer's model file (load_restorer), or "" for none
  bool rigid_maps = true;  // StreamOptions::rigid_maps
  // StreamOptions::anchor_refresh (anchor-map models; other streams have no map to keep).
  // Measured on the shipped model (docs/VIDEO.md, session 16): 12-24 keep its streams alive in
  // 73-76 of 100 windows over 10 held-out videos, 8 in 52, 4 in 22 of 50, never in 14 of 50.
  int64_t anchor_refresh = 16;
};
StreamOptions stream_options(const VideoModelInfo& info, const std::string& path,
                             const StreamRequest& request);

// A model file's stream as `mixprec video generate` and mixprec.video.VideoStream start it: the
// network (its weights converted to `weights`, f32 norms staying f32), started on the first
// frames of dataset video `video` (-1: the first held-out one) with stream_options(request).
struct ModelStream {
  VideoModelInfo info;
  std::unique_ptr<UNetVideo> model;
  data::MovingShapes videos;  // the dataset the model was trained on
  int64_t video = 0;          // the dataset video the stream started on
  StreamOptions options;      // as resolved from the request and the file
  std::unique_ptr<UNetVideo> restorer;  // the request's restorer, or null
  std::unique_ptr<VideoStream> stream;
};
// `plan`, when given, then stores each module it names in its dtype (nn::to_precision).
ModelStream open_model_stream(const std::string& path, int64_t video, const StreamRequest& request,
                              DType weights = DType::F32,
                              std::shared_ptr<const amp::PrecisionPlan> plan = nullptr);

}  // namespace mixprec::models
