#include "mixprec/amp/precision_config.h"

#include <array>
#include <utility>

#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/error.h"

namespace mixprec::amp {
namespace {

constexpr std::array<std::pair<std::string_view, PrecisionConfig>, 5> kPresets = {{
    {"fp32", {DType::F32, DType::F32, true, LossScaling::None}},
    {"bf16", {DType::BF16, DType::F32, true, LossScaling::None}},
    {"fp16", {DType::F16, DType::F32, true, LossScaling::Dynamic}},
    {"bf16-params", {DType::BF16, DType::BF16, true, LossScaling::None}},
    {"fp16-params", {DType::F16, DType::F16, true, LossScaling::Dynamic}},
}};

bool same(const PrecisionConfig& a, const PrecisionConfig& b) {
  return a.compute == b.compute && a.params == b.params && a.keep_f32 == b.keep_f32 &&
         a.loss_scaling == b.loss_scaling;
}

}  // namespace

PrecisionConfig PrecisionConfig::auto_detect() { return for_compute(auto_precision().dtype); }

PrecisionConfig PrecisionConfig::for_compute(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return parse("bf16");
    case DType::F16:
      return parse("fp16");
    default:
      return parse("fp32");
  }
}

PrecisionConfig PrecisionConfig::parse(std::string_view name) {
  if (name == "auto") return auto_detect();
  for (const auto& [preset, config] : kPresets)
    if (name == preset) return config;
  std::string names = "auto";
  for (const auto& preset : kPresets) names += std::string("|") + std::string(preset.first);
  throw Error("[precision] unknown precision '" + std::string(name) + "', expected one of " +
              names);
}

std::string PrecisionConfig::name() const {
  for (const auto& [preset, config] : kPresets)
    if (same(*this, config)) return std::string(preset);
  return std::string("compute=") + std::string(dtype_name(compute)) +
         " params=" + std::string(dtype_name(params)) +
         (loss_scaling == LossScaling::None     ? ""
          : loss_scaling == LossScaling::Static ? " static-scaling"
                                                : " dynamic-scaling");
}

GradScalerOptions PrecisionConfig::scaler_options() const {
  GradScalerOptions o;
  o.enabled = loss_scaling != LossScaling::None;
  o.dynamic = loss_scaling == LossScaling::Dynamic;
  return o;
}

}  // namespace mixprec::amp
