#include "mixprec/io/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "mixprec/core/error.h"
#include "mixprec/io/json.h"

namespace mixprec::io {
namespace {

constexpr const char* kFormat = "mixprec.checkpoint";
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool reserved_key(const std::string& key) {
  return key == "format" || starts_with(key, "mixprec.");
}

// The shortest decimal text that parses back to exactly `v` (JSON has no inf/NaN).
std::string number_text(double v, const std::string& label) {
  MIXPREC_CHECK(std::isfinite(v), "[checkpoint] ", label, " is ", v, ", which JSON cannot hold");
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  MIXPREC_ASSERT(ec == std::errc());
  return std::string(buf, end);
}

std::string numbers_object(const std::map<std::string, double>& values, const std::string& label) {
  std::string out = "{";
  for (const auto& [key, value] : values) {
    if (out.size() > 1) out += ", ";
    out += json_quote(key) + ": " + number_text(value, label + " '" + key + "'");
  }
  return out + "}";
}

// A JSON object of numbers back into a map; `where` prefixes error messages.
std::map<std::string, double> read_numbers(const JsonValue& v, const std::string& where) {
  MIXPREC_CHECK(v.is_object(), where, " must be a JSON object, got ",
                JsonValue::kind_name(v.kind()));
  std::map<std::string, double> out;
  for (const JsonMember& m : v.members()) {
    MIXPREC_CHECK(m.value.is_number(), where, " '", m.key, "' must be a number, got ",
                  JsonValue::kind_name(m.value.kind()));
    out[m.key] = m.value.as_double();
  }
  return out;
}

const std::string& required(const SafetensorsMetadata& meta, const std::string& key,
                            const std::string& where) {
  const auto it = meta.find(key);
  MIXPREC_CHECK(it != meta.end(), where, "metadata '", key,
                "' is missing (not a mixprec checkpoint?)");
  return it->second;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler* scaler,
                     const SafetensorsMetadata& metadata) {
  SafetensorsMetadata meta;
  for (const auto& [key, value] : metadata) {
    MIXPREC_CHECK(!reserved_key(key), "[checkpoint] metadata key '", key,
                  "' is reserved (\"format\" and \"mixprec.*\" are the checkpoint's own)");
    meta[key] = value;
  }
  const optim::OptimizerState state = optimizer.state_dict();
  meta["format"] = kFormat;
  meta["mixprec.version"] = "1";
  meta["mixprec.optimizer"] =
      "{\"type\": " + json_quote(state.type) + ", \"seed\": " + std::to_string(state.seed) +
      ", \"hyperparameters\": " + numbers_object(state.hyperparameters, "hyper-parameter") + "}";
  if (scaler != nullptr) meta["mixprec.scaler"] = numbers_object(scaler->state_dict(), "scaler");
  int64_t step = 0;
  for (std::size_t i = 0; i < optimizer.params().size(); ++i)
    step = std::max(step, optimizer.step_count(i));
  meta["mixprec.step"] = std::to_string(step);

  NamedTensors tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(kModelPrefix + name, t);
  for (const auto& [name, t] : state.tensors) tensors.emplace_back(kOptimPrefix + name, t);
  save_safetensors(path, tensors, meta);
}

SafetensorsMetadata load_checkpoint(const std::string& path, nn::Module& model,
                                    optim::Optimizer& optimizer, amp::GradScaler* scaler) {
  const std::string where = "[checkpoint] " + path + ": ";
  const SafetensorsFile file = SafetensorsFile::open(path);
  const SafetensorsMetadata& meta = file.metadata();
  MIXPREC_CHECK(required(meta, "format", where) == kFormat, where, "format is '", meta.at("format"),
                "', expected '", kFormat, "'");
  MIXPREC_CHECK(required(meta, "mixprec.version", where) == "1", where, "version '",
                meta.at("mixprec.version"), "' is not one this build reads (1)");

  // The optimizer's metadata.
  const JsonParseOptions json_options{.context = "[checkpoint] mixprec.optimizer",
                                      .max_values = 4096};
  const JsonValue opt_json = parse_json(required(meta, "mixprec.optimizer", where), json_options);
  MIXPREC_CHECK(opt_json.is_object(), where, "mixprec.optimizer must be a JSON object");
  const JsonValue* type = opt_json.find("type");
  const JsonValue* seed = opt_json.find("seed");
  const JsonValue* hyper = opt_json.find("hyperparameters");
  MIXPREC_CHECK(type != nullptr && type->is_string() && seed != nullptr && seed->is_number() &&
                    seed->as_uint64().has_value() && hyper != nullptr,
                where,
                "mixprec.optimizer needs a string 'type', an unsigned 'seed' and "
                "'hyperparameters'");
  optim::OptimizerState state;
  state.type = type->as_string();
  state.seed = *seed->as_uint64();
  state.hyperparameters = read_numbers(*hyper, where + "mixprec.optimizer hyperparameters");

  std::map<std::string, double> scaler_state;
  if (scaler != nullptr) {
    const JsonValue s = parse_json(required(meta, "mixprec.scaler", where),
                                   {.context = "[checkpoint] mixprec.scaler", .max_values = 256});
    scaler_state = read_numbers(s, where + "mixprec.scaler");
  }

  // The tensors, split by owner; the model's are checked against it before anything is loaded.
  nn::NamedTensors model_state;
  for (const TensorInfo& info : file.tensors()) {
    if (starts_with(info.name, kModelPrefix)) {
      model_state.emplace_back(info.name.substr(6), file.tensor(info));
    } else if (starts_with(info.name, kOptimPrefix)) {
      state.tensors.emplace_back(info.name.substr(6), file.tensor(info));
    } else {
      MIXPREC_CHECK(false, where, "unexpected tensor '", info.name,
                    "' (expected 'model.*' or 'optim.*')");
    }
  }
  {
    std::map<std::string, const Tensor*> expected;
    const nn::NamedTensors own = model.state_dict();
    for (const auto& [name, t] : own) expected.emplace(name, &t);
    std::set<std::string> seen;
    for (const auto& [name, t] : model_state) {
      const auto it = expected.find(name);
      MIXPREC_CHECK(it != expected.end(), where, "tensor 'model.", name, "' is not in the model");
      MIXPREC_CHECK(t.shape() == it->second->shape() && t.dtype() == it->second->dtype(), where,
                    "'model.", name, "' is ", dtype_name(t.dtype()), " ",
                    shape_to_string(t.shape()), ", the model's is ",
                    dtype_name(it->second->dtype()), " ", shape_to_string(it->second->shape()));
      seen.insert(name);
    }
    for (const auto& [name, t] : own)
      MIXPREC_CHECK(seen.count(name) == 1, where, "the model's '", name,
                    "' is missing from the checkpoint");
  }

  // The optimizer validates everything before it changes anything, so it goes first.
  optimizer.load_state_dict(state);
  model.load_state_dict(model_state, true);
  if (scaler != nullptr) scaler->load_state_dict(scaler_state);

  SafetensorsMetadata user;
  for (const auto& [key, value] : meta)
    if (!reserved_key(key)) user[key] = value;
  return user;
}

}  // namespace mixprec::io
