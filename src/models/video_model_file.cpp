#include "mixprec/models/video_model_file.h"

#include <cmath>
#include <cstdlib>

#include "mixprec/core/error.h"
#include "mixprec/io/module_file.h"
#include "metadata_fields.h"

namespace mixprec::models {
namespace {

constexpr const char* kFormat = "mixprec.video_model";

int64_t to_int(const std::string& path, const std::string& key, std::string_view text) {
  return detail::parse_int_field("video model", path, key, text);
}

std::vector<int64_t> to_list(const std::string& path, const std::string& key, const std::string& text) {
  return detail::parse_int_list_field("video model", path, key, text);
}

}  // namespace

void save_video_model(const std::string& path, const UNetVideo& model, const VideoModelInfo& info) {
  io::SafetensorsMetadata m = info.extra;
  const UNetVideoConfig& c = model.config();
  m["format"] = kFormat;
  m["unet.name"] = c.name;
  m["unet.frame_channels"] = std::to_string(c.frame_channels);
  m["unet.base_channels"] = std::to_string(c.base_channels);
  m["unet.channel_mults"] = detail::join_ints(c.channel_mults);
  m["unet.res_blocks"] = std::to_string(c.res_blocks);
  m["unet.attention_levels"] = detail::join_ints(c.attention_levels);
  m["unet.head_dim"] = std::to_string(c.head_dim);
  m["unet.groups"] = std::to_string(c.groups);
  m["unet.context_frames"] = std::to_string(c.context_frames);
  m["unet.context_noise_level"] = c.context_noise_level ? "1" : "0";
  m["unet.anchor_frame"] = c.anchor_frame ? "1" : "0";
  m["unet.motion"] = c.motion ? "1" : "0";
  m["unet.anchor_map"] = c.anchor_map ? "1" : "0";
  m["unet.flow_input"] = c.flow_input ? "1" : "0";
  m["unet.reflect"] = c.reflect ? "1" : "0";
  m["diffusion.prediction"] = prediction_name(info.prediction);
  m["diffusion.steps"] = std::to_string(info.schedule_steps);
  m["diffusion.residual"] = info.residual ? "1" : "0";
  io::save_module(model, path, m);
}

std::unique_ptr<UNetVideo> load_video_model(const std::string& path, VideoModelInfo* info) {
  const io::SafetensorsMetadata m = io::SafetensorsFile::open(path).metadata();
  constexpr std::string_view kWriter = "save_video_model / mixprec video train";
  auto get = [&](const std::string& key) -> const std::string& {
    return detail::required_field("video model", path, m, key, kWriter);
  };
  detail::check_format("video model", path, m, kFormat, kWriter);
  VideoModelInfo result;
  UNetVideoConfig& c = result.config;
  c.name = get("unet.name");
  c.frame_channels = to_int(path, "unet.frame_channels", get("unet.frame_channels"));
  c.base_channels = to_int(path, "unet.base_channels", get("unet.base_channels"));
  c.channel_mults = to_list(path, "unet.channel_mults", get("unet.channel_mults"));
  c.res_blocks = to_int(path, "unet.res_blocks", get("unet.res_blocks"));
  c.attention_levels = to_list(path, "unet.attention_levels", get("unet.attention_levels"));
  c.head_dim = to_int(path, "unet.head_dim", get("unet.head_dim"));
  c.groups = to_int(path, "unet.groups", get("unet.groups"));
  // Absent in files from before these options: one context frame, no noise level, no anchor,
  // no motion.
  if (m.count("unet.context_frames"))
    c.context_frames = to_int(path, "unet.context_frames", get("unet.context_frames"));
  if (m.count("unet.context_noise_level"))
    c.context_noise_level =
        to_int(path, "unet.context_noise_level", get("unet.context_noise_level")) != 0;
  if (m.count("unet.anchor_frame"))
    c.anchor_frame = to_int(path, "unet.anchor_frame", get("unet.anchor_frame")) != 0;
  if (m.count("unet.motion")) c.motion = to_int(path, "unet.motion", get("unet.motion")) != 0;
  if (m.count("unet.anchor_map"))
    c.anchor_map = to_int(path, "unet.anchor_map", get("unet.anchor_map")) != 0;
  if (m.count("unet.flow_input"))
    c.flow_input = to_int(path, "unet.flow_input", get("unet.flow_input")) != 0;
  if (m.count("unet.reflect"))
    c.reflect = to_int(path, "unet.reflect", get("unet.reflect")) != 0;
  result.prediction = parse_prediction(get("diffusion.prediction"));
  result.schedule_steps = to_int(path, "diffusion.steps", get("diffusion.steps"));
  // Absent in files from before residual models: the frame itself.
  if (m.count("diffusion.residual"))
    result.residual = to_int(path, "diffusion.residual", get("diffusion.residual")) != 0;
  for (const auto& [key, value] : m)
    if (key != "format" && key.rfind("unet.", 0) != 0 && key.rfind("diffusion.", 0) != 0)
      result.extra[key] = value;
  auto model = std::make_unique<UNetVideo>(c);
  io::load_module(*model, path);
  if (info != nullptr) *info = std::move(result);
  return model;
}

data::MovingShapes training_dataset(const VideoModelInfo& info, const std::string& path) {
  auto field = [&](const char* name, uint64_t max) {
    const auto it = info.extra.find(name);
    if (it == info.extra.end())
      throw Error(path + ": the model file has no '" + name +
                  "' metadata (the dataset it was trained on); write it with 'mixprec video train'");
    uint64_t v = 0;
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v > max)
      throw Error(path + ": metadata '" + name + "' is '" + text +
                  "', expected an integer in [0, " + std::to_string(max) + "]");
    return v;
  };
  const auto size = static_cast<int64_t>(field("size", 16384));
  return data::MovingShapes({.height = size, .width = size}, field("seed", UINT64_MAX));
}

std::unique_ptr<UNetVideo> load_restorer(const std::string& path, DType weights) {
  VideoModelInfo info;
  std::unique_ptr<UNetVideo> restorer = load_video_model(path, &info);
  const auto it = info.extra.find("restorer");
  if (it == info.extra.end() || it->second != "1" || info.prediction != Prediction::Direct ||
      !info.residual || restorer->config().context_frames != 1)
    throw Error(path + ": not a restorer (a direct residual model with one context frame, "
                       "written by 'mixprec video train --restorer')");
  if (weights != DType::F32) restorer->to(weights);
  return restorer;
}

double stream_setting(const VideoModelInfo& info, const std::string& path, const std::string& key,
                      double requested) {
  if (!std::isnan(requested)) return requested;
  const auto it = info.extra.find(key);
  if (it == info.extra.end()) return 0.0;
  char* end = nullptr;
  const double value = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !(value >= 0 && value <= 1))
    throw Error(path + ": metadata '" + key + "' is '" + it->second +
                "', expected a number in [0, 1]");
  return value;
}

StreamOptions stream_options(const VideoModelInfo& info, const std::string& path,
                             const StreamRequest& request) {
  const bool direct = info.prediction == Prediction::Direct;
  return {.steps = direct ? 1 : request.steps,
          .prediction = info.prediction,
          .seed = static_cast<uint64_t>(request.seed),
          .context_noise = stream_setting(info, path, "stream_context_noise", request.context_noise),
          .residual = info.residual,
          .still_threshold =
              stream_setting(info, path, "stream_still_threshold", request.still_threshold),
          .graph = request.graph,
          .rigid_maps = request.rigid_maps,
          .anchor_refresh = request.anchor_refresh};
}

}  // namespace mixprec::models
