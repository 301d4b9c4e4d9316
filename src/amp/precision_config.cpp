#include "mixprec/amp/precision_config.h"

#include <array>
#include <utility>

#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/error.h"

namespace mixprec::amp {
namespace {

const std::array<std::pair<std::string_view, PrecisionConfig>, 5> kPresets = {{
    {"fp32", {DType::F32, DType::F32, true, LossScaling::None, nullptr}},
    {"bf16", {DType::BF16, DType::F32, true, LossScaling::None, nullptr}},
    {"fp16", {DType::F16, DType::F32, true, LossScaling::Dynamic, nullptr}},
    {"bf16-params", {DType::BF16, DType::BF16, true, LossScaling::None, nullptr}},
    {"fp16-params", {DType::F16, DType::F16, true, LossScaling::Dynamic, nullptr}},
}};

bool same(const PrecisionConfig& a, const PrecisionConfig& b) {
  return a.compute == b.compute && a.params == b.params && a.keep_f32 == b.keep_f32 &&
         a.loss_scaling == b.loss_scaling && a.plan == b.plan;
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
  if (name.starts_with("plan:")) {
    PrecisionConfig c;  // f32 compute and storage but for the plan's modules
    c.plan = std::make_shared<const PrecisionPlan>(
        read_precision_plan(std::string(name.substr(std::string_view("plan:").size()))));
    // A module in f16 computes in f16 (nn::as_input_of): its gradients need the loss scaled, as
    // fp16-params does.
    for (const PlanLayer& layer : c.plan->layers)
      if (layer.dtype == DType::F16) c.loss_scaling = LossScaling::Dynamic;
    return c;
  }
  for (const auto& [preset, config] : kPresets)
    if (name == preset) return config;
  std::string names = "auto";
  for (const auto& preset : kPresets) names += std::string("|") + std::string(preset.first);
  names += "|plan:FILE";
  throw Error("[precision] unknown precision '" + std::string(name) + "', expected one of " +
              names);
}

std::string PrecisionConfig::name() const {
  if (plan) return "plan:" + plan->setting();
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
