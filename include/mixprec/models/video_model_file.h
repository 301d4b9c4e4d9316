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
#include <memory>
#include <string>

#include "mixprec/io/safetensors.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"

namespace mixprec::models {

struct VideoModelInfo {
  UNetVideoConfig config;
  Prediction prediction = Prediction::V;
  int64_t schedule_steps = 1000;
  bool residual = false;  // the network denoises the change from the last context frame
  io::SafetensorsMetadata extra;  // the caller's own metadata
};

// Writes the weights (in their own dtype) and `info` atomically.
void save_video_model(const std::string& path, const UNetVideo& model, const VideoModelInfo& info);

// Reads `path`, rebuilds the network it describes and loads its weights (f32 parameters,
// converted exactly from whatever dtype the file holds). Errors name the file and the problem.
std::unique_ptr<UNetVideo> load_video_model(const std::string& path, VideoModelInfo* info);

}  // namespace mixprec::models
