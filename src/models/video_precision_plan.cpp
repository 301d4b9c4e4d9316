#include "mixprec/models/video_precision_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "plan_measure.h"

namespace mixprec::models {

using plan_detail::kGradientScale;
using plan_detail::median_ms;
using plan_detail::relative_error;

// The map supervision weight of an anchor-map model's loss while its gradients are measured: the
// shipped model's (`video train --map-supervision 0.1`).
constexpr double kPlanMapWeight = 0.1;

amp::PrecisionPlan plan_video_precision(UNetVideo& model, const VideoModelInfo& info,
                                        const data::MovingShapes& data, const VideoPlanOptions& o) {
  MIXPREC_CHECK(o.clips >= 1 && o.steps >= 1 && o.repetitions >= 1 && o.budget >= 0,
                "[precision plan] clips, steps and repetitions must be >= 1, the budget >= 0");
  plan_detail::require_f32_parameters(model);
  const bool was_training = model.training();
  model.eval();
  const UNetVideoConfig& c = model.config();
  const int64_t k = c.context_frames;
  const bool direct = info.prediction == Prediction::Direct;
  const NoiseSchedule schedule = NoiseSchedule::cosine(info.schedule_steps);

  // Held-out clips of K context frames and the frame after them, as one batch (8-bit, as a
  // stream's context is); an anchor model's anchor is the clip's first frame, an anchor-map
  // model's the newest context frame (which its loss takes from the window itself).
  std::vector<Tensor> window(static_cast<std::size_t>(k + 1));
  std::vector<data::WindowOrigin> origins;
  for (int64_t i = 0; i < o.clips; ++i) origins.push_back({data.config().held_out(i), 0});
  {
    std::vector<std::vector<Tensor>> frames(static_cast<std::size_t>(k + 1));
    for (int64_t i = 0; i < o.clips; ++i) {
      const Tensor clip = data.clip(data.config().held_out(i), 0, k + 1);
      for (int64_t f = 0; f <= k; ++f)
        frames[static_cast<std::size_t>(f)].push_back(quantize_8bit(clip.narrow(0, f, 1)));
    }
    for (int64_t f = 0; f <= k; ++f)
      window[static_cast<std::size_t>(f)] = cat(frames[static_cast<std::size_t>(f)], 0);
  }
  const Tensor& newest = window[static_cast<std::size_t>(k - 1)];
  const Tensor anchor = c.anchor_map ? newest : c.anchor_frame ? window.front() : Tensor();
  const Tensor context = context_of({window.begin(), window.end() - 1});
  Generator noise_gen(o.seed);
  const Tensor noise = Tensor::randn(window.back().shape(), noise_gen);
  // A stream's first frame: no previous flow, and a map that reads the anchor in place.
  const Tensor no_motion = Tensor::zeros({o.clips, 2, newest.size(2), newest.size(3)}, DType::F32,
                                         MemoryFormat::ChannelsLast);
  const Tensor input = c.flow_input ? with_flow(with_anchor(anchor, context), no_motion)
                                    : with_anchor(anchor, context);

  // The next frame of every clip, as a stream makes it (no gradient).
  const auto frame = [&] {
    if (c.anchor_map)
      return sample_anchor_map_frames(model, input, Tensor(), anchor, newest, no_motion).frame;
    return sample_next_frames(model, schedule, input, Tensor(), noise, direct ? 1 : o.steps,
                              info.prediction, DType::F32, info.residual ? newest : Tensor());
  };
  // Every parameter's gradient of the training loss on the clips (the same draws each time).
  const auto gradients = [&] {
    EnableGrad grad;
    for (const Tensor& p : model.parameters()) p.zero_grad();
    Generator gen(o.seed ^ 0x91a7ULL);
    VideoLossOptions options;
    options.prediction = info.prediction;
    options.context_noise_max = 0;
    options.quantize_context = true;
    options.residual = info.residual;
    if (c.anchor_map) {  // the map and gates graded against the renderer's, as in training
      options.map_weight = kPlanMapWeight;
      options.map_target = [&](int64_t a, int64_t f) { return data.anchor_maps(origins, a, f); };
    }
    const Tensor loss = direct ? video_rollout_loss(model, window, options, DType::F32, gen,
                                                    c.anchor_map ? Tensor() : anchor)
                               : video_diffusion_loss(model, schedule, context, window.back(),
                                                      options, DType::F32, gen);
    mul(loss, kGradientScale).backward();
    std::vector<Tensor> out;
    for (const Tensor& p : model.parameters()) {
      out.push_back(p.grad().defined() ? div(p.grad().to(DType::F32), kGradientScale) : Tensor());
      p.zero_grad();
    }
    return out;
  };
  const auto frame_ms = [&] { return median_ms(o.repetitions, [&] { (void)frame(); }); };

  const std::vector<Tensor> reference_frame{frame()};
  const std::vector<Tensor> reference_grads = gradients();
  (void)frame_ms();  // warm: packed weights, scratch
  amp::PrecisionPlan plan;
  plan.model = "video";
  plan.budget = o.budget;
  for (const auto& [name, module] : model.named_children()) {
    if (module->parameters().empty() || nn::Module::is_norm_layer(*module)) continue;  // stays f32
    amp::PlanLayer layer;
    layer.name = name;
    const nn::NamedTensors f32_state = module->state_dict();
    for (DType t : {DType::BF16, DType::F16}) {
      module->to(t);  // as nn::to_precision will: norm layers inside stay f32
      const bool bf16 = t == DType::BF16;
      (bf16 ? layer.error_bf16 : layer.error_f16) = relative_error({frame()}, reference_frame);
      (bf16 ? layer.grad_error_bf16 : layer.grad_error_f16) =
          relative_error(gradients(), reference_grads);
      // What storing the module in bf16 saves of the frame's time: the converted and the f32
      // frame timed one after the other, each a median, so that a busy machine slows both alike.
      const double converted_ms = bf16 ? frame_ms() : 0;
      module->to(DType::F32);
      module->load_state_dict(f32_state);  // the f32 weights back, bit for bit
      if (bf16) {
        const double f32_ms = frame_ms();
        layer.time_saved_bf16 = (f32_ms - converted_ms) / f32_ms;
      }
    }
    layer.dtype =
        amp::choose_layer_dtype(std::max(layer.error_bf16, layer.grad_error_bf16),
                                std::max(layer.error_f16, layer.grad_error_f16), o.budget);
    plan.layers.push_back(layer);
  }
  model.train(was_training);
  return plan;
}

}  // namespace mixprec::models
