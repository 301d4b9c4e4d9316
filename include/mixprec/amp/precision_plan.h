#pragma once
// A per-layer precision plan: which modules of a model keep their parameters in f32 and which
// store them in bf16 or f16, as `mixprec precision plan` measured and chose them under an error
// budget. `--precision plan:FILE` reads one into a PrecisionConfig (amp/precision_config.h), and
// nn::to_precision applies it by Module::to(dtype) per named submodule: the same conversion as
// the whole-model presets, one module at a time (norm layers inside stay f32).
//
// The file is a small JSON object:
//   {"model": "gpt", "budget": 0.01,
//    "layers": [{"name": "h.0", "dtype": "bf16", "error_bf16": 0.0041, "error_f16": 0.0005,
//                "grad_error_bf16": 0.006, "grad_error_f16": 0.0008, "time_share": 0.15,
//                "time_saved_bf16": 0.02}, ...]}
// "layers" with each "name" (a module's dotted name, unique, not inside another listed one) and
// "dtype" (f32, bf16 or f16) is what applies; "model", "budget", the errors and the time share
// are the planner's record. Anything else, or a wrong kind, is an Error naming the file.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/core/dtype.h"

namespace mixprec::amp {

struct PlanLayer {
  std::string name;
  DType dtype = DType::F32;
  // The planner's measurements (NaN when the file does not record them).
  double error_bf16 = std::numeric_limits<double>::quiet_NaN();
  double error_f16 = std::numeric_limits<double>::quiet_NaN();
  // The same for the gradients of every parameter (relative RMS over all of them).
  double grad_error_bf16 = std::numeric_limits<double>::quiet_NaN();
  double grad_error_f16 = std::numeric_limits<double>::quiet_NaN();
  double time_share = std::numeric_limits<double>::quiet_NaN();
  // The share of the all-f32 step that storing only this layer in bf16 saved (measured; can be
  // negative on a busy machine or where a conversion costs more than it saves).
  double time_saved_bf16 = std::numeric_limits<double>::quiet_NaN();
};

struct PrecisionPlan {
  std::string model;  // what it was planned for ("gpt", "video"); informational
  double budget = std::numeric_limits<double>::quiet_NaN();
  std::vector<PlanLayer> layers;

  // "h.0=bf16,h.1=f32,...": what a checkpoint records as its precision, so that a resumed run
  // with another plan is refused.
  std::string setting() const;
};

// The cheapest dtype whose measured error (the larger of the output's and the gradients') is
// within the budget: the 16-bit ones halve the layer's parameter bytes; between them bf16 (f32's
// range: no loss scaling) before f16; f32 when neither is within it. A NaN error is never
// within.
DType choose_layer_dtype(double error_bf16, double error_f16, double budget);

// Parses a plan; `source` names it in errors ("[precision plan] plan.json: ...").
PrecisionPlan parse_precision_plan(std::string_view text, const std::string& source);
PrecisionPlan read_precision_plan(const std::string& path);
std::string to_json(const PrecisionPlan& plan);
void write_precision_plan(const std::string& path, const PrecisionPlan& plan);  // atomically

}  // namespace mixprec::amp
