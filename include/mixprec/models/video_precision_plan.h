#pragma once
// The per-layer precision planner for a UNetVideo (`mixprec precision plan --model video`): for
// each top-level module of the network (conv_in, the time MLP, each down, mid and up level,
// conv_out) it measures, with only that module storing its parameters in bf16 or f16 (the rest
// f32), the error of the frames a stream generates from held-out clips and of every parameter's
// gradient of the model's training loss, and what storing the module in bf16 saves of the
// frame's time; then it picks per module the cheapest dtype whose larger error is within the
// budget (amp::choose_layer_dtype). The plan applies through nn::to_precision, the same
// Module::to(dtype) a module gets here while it is measured.
#include <cstdint>

#include "mixprec/amp/precision_plan.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_model_file.h"

namespace mixprec::models {

struct VideoPlanOptions {
  double budget = 0.01;  // relative RMS error (frames, gradients) vs all-f32 a module may cause
  int64_t clips = 4;     // held-out clips (one frame each is generated and trained on)
  int64_t steps = 4;     // DDIM steps per frame of a diffusion model (a direct one runs once)
  uint64_t seed = 0;     // of the sampler's noise and the loss's draws
  int repetitions = 5;   // timed frames per configuration; the median counts
};

// Leaves `model` as it found it (f32 parameters, bit for bit). Throws when the model's
// parameters are not all f32 (plan from the f32 weights).
amp::PrecisionPlan plan_video_precision(UNetVideo& model, const VideoModelInfo& info,
                                        const data::MovingShapes& data,
                                        const VideoPlanOptions& options);

}  // namespace mixprec::models
