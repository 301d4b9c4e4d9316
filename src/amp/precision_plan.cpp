#include "mixprec/amp/precision_plan.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"  // layer exceptions: see tools/check_layers.py
#include "mixprec/io/json.h"

namespace mixprec::amp {
namespace {

constexpr std::size_t kMaxPlanBytes = 1 << 20;

bool plan_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Whether `inner` is `outer` or a module inside it ("h.1.attn" is inside "h.1", "h.10" is not).
bool inside(const std::string& inner, const std::string& outer) {
  return inner == outer ||
         (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
          inner[outer.size()] == '.');
}

double optional_number(const io::JsonValue& layer, std::string_view key, const std::string& where) {
  const io::JsonValue* v = layer.find(key);
  if (v == nullptr || v->is_null()) return std::numeric_limits<double>::quiet_NaN();
  MIXPREC_CHECK(v->is_number(), where, ": '", key, "' must be a number");
  return v->as_double();
}

}  // namespace

std::string PrecisionPlan::setting() const {
  std::string s;
  for (const PlanLayer& l : layers)
    s += (s.empty() ? "" : ",") + l.name + "=" + std::string(dtype_name(l.dtype));
  return s;
}

DType choose_layer_dtype(double error_bf16, double error_f16, double budget) {
  if (error_bf16 <= budget) return DType::BF16;  // false for NaN
  if (error_f16 <= budget) return DType::F16;
  return DType::F32;
}

PrecisionPlan parse_precision_plan(std::string_view text, const std::string& source) {
  const std::string context = "[precision plan] " + source;
  const io::JsonValue root =
      io::parse_json(text, {.context = context, .max_depth = 8, .max_values = 1 << 16});
  MIXPREC_CHECK(root.is_object(), context, ": expected a JSON object, got ",
                io::JsonValue::kind_name(root.kind()));
  PrecisionPlan plan;
  bool has_layers = false;
  for (const io::JsonMember& m : root.members()) {
    if (m.key == "model") {
      MIXPREC_CHECK(m.value.is_string(), context, ": 'model' must be a string");
      plan.model = m.value.as_string();
    } else if (m.key == "budget") {
      MIXPREC_CHECK(m.value.is_number(), context, ": 'budget' must be a number");
      plan.budget = m.value.as_double();
    } else if (m.key == "layers") {
      MIXPREC_CHECK(m.value.is_array(), context, ": 'layers' must be an array");
      has_layers = true;
      for (const io::JsonValue& l : m.value.items()) {
        const std::string where = context + ": layer " + std::to_string(plan.layers.size());
        MIXPREC_CHECK(l.is_object(), where, " must be an object");
        for (const io::JsonMember& f : l.members())
          MIXPREC_CHECK(f.key == "name" || f.key == "dtype" || f.key == "error_bf16" ||
                            f.key == "error_f16" || f.key == "grad_error_bf16" ||
                            f.key == "grad_error_f16" || f.key == "time_share" ||
                            f.key == "time_saved_bf16",
                        where, ": unknown key '", f.key,
                        "' (expected name, dtype, error_bf16, error_f16, grad_error_bf16, "
                        "grad_error_f16, time_share, time_saved_bf16)");
        const io::JsonValue* name = l.find("name");
        const io::JsonValue* dtype = l.find("dtype");
        MIXPREC_CHECK(name != nullptr && name->is_string() && !name->as_string().empty(), where,
                      ": 'name' must be a module's dotted name");
        MIXPREC_CHECK(dtype != nullptr && dtype->is_string(), where, " (", name->as_string(),
                      "): 'dtype' must be a string");
        PlanLayer layer;
        layer.name = name->as_string();
        DType t = DType::Bool;
        try {
          t = parse_dtype(dtype->as_string());
        } catch (const Error&) {
        }
        MIXPREC_CHECK(plan_dtype(t), where, " (", layer.name, "): dtype '", dtype->as_string(),
                      "' is not one a plan can run here (f32, bf16 or f16)");
        layer.dtype = t;
        layer.error_bf16 = optional_number(l, "error_bf16", where);
        layer.error_f16 = optional_number(l, "error_f16", where);
        layer.grad_error_bf16 = optional_number(l, "grad_error_bf16", where);
        layer.grad_error_f16 = optional_number(l, "grad_error_f16", where);
        layer.time_share = optional_number(l, "time_share", where);
        layer.time_saved_bf16 = optional_number(l, "time_saved_bf16", where);
        for (const PlanLayer& other : plan.layers)
          MIXPREC_CHECK(!inside(layer.name, other.name) && !inside(other.name, layer.name), context,
                        ": layers '", other.name, "' and '", layer.name,
                        "' overlap (the same module, or one inside the other)");
        plan.layers.push_back(std::move(layer));
      }
    } else {
      throw Error(context + ": unknown key '" + m.key + "' (expected model, budget, layers)");
    }
  }
  MIXPREC_CHECK(has_layers, context, ": no 'layers'");
  return plan;
}

PrecisionPlan read_precision_plan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MIXPREC_CHECK(in.good(), "[precision plan] cannot open ", path);
  std::ostringstream text;
  text << in.rdbuf();
  MIXPREC_CHECK(text.str().size() <= kMaxPlanBytes, "[precision plan] ", path,
                " is larger than 1 MiB: not a plan");
  return parse_precision_plan(text.str(), path);
}

std::string to_json(const PrecisionPlan& plan) {
  std::string out = "{\"model\": " + io::json_quote(plan.model) +
                    ", \"budget\": " + io::json_number(plan.budget) + ",\n \"layers\": [";
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const PlanLayer& l = plan.layers[i];
    out += std::string(i ? ",\n  " : "\n  ") + "{\"name\": " + io::json_quote(l.name) +
           ", \"dtype\": " + io::json_quote(dtype_name(l.dtype)) +
           ", \"error_bf16\": " + io::json_number(l.error_bf16) +
           ", \"error_f16\": " + io::json_number(l.error_f16) +
           ", \"grad_error_bf16\": " + io::json_number(l.grad_error_bf16) +
           ", \"grad_error_f16\": " + io::json_number(l.grad_error_f16) +
           ", \"time_share\": " + io::json_number(l.time_share) +
           ", \"time_saved_bf16\": " + io::json_number(l.time_saved_bf16) + "}";
  }
  return out + "]}\n";
}

void write_precision_plan(const std::string& path, const PrecisionPlan& plan) {
  const std::string text = to_json(plan);
  io::AtomicFile file(path, "precision plan");
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace mixprec::amp
