#include "mixprec/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::optim {
namespace {

bool is_16bit(DType t) { return t == DType::F16 || t == DType::BF16; }
DType state_dtype(const Tensor& p) { return p.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// A state tensor for parameter p: p's shape and layout, `dtype`, holding `values` (or zeros).
Tensor companion(const Tensor& p, DType dtype, const Tensor& values = Tensor()) {
  Tensor t = Tensor::empty_like(p, dtype);
  if (values.defined())
    t.copy_(values);
  else
    t.zero_();
  return t;
}

// "<i>.<field>" split; false when the name has no such form.
bool split_name(const std::string& name, std::size_t& index, std::string& field) {
  const std::size_t dot = name.find('.');
  if (dot == 0 || dot == std::string::npos) return false;
  const char* end = name.data() + dot;
  const auto [ptr, ec] = std::from_chars(name.data(), end, index);
  if (ec != std::errc() || ptr != end) return false;
  field = name.substr(dot + 1);
  return true;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, Rounding rounding, uint64_t seed)
    : params_(std::move(params)), slots_(params_.size()), rounding_(rounding), seed_(seed) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    MIXPREC_CHECK(params_[i].defined(), "[optimizer] parameter ", i, " is an undefined tensor");
    MIXPREC_CHECK(is_floating(params_[i].dtype()), "[optimizer] parameter ", i, " has dtype ",
                  dtype_name(params_[i].dtype()), ", expected a floating dtype");
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

int64_t Optimizer::step_count(std::size_t i) const {
  MIXPREC_CHECK(i < params_.size(), "[", type_name(), "] parameter index ", i, " out of range (",
                params_.size(), " parameters)");
  return slots_[i].step;
}

const Tensor& Optimizer::master(std::size_t i) const {
  step_count(i);  // range check
  return slots_[i].master;
}

const Tensor& Optimizer::state(std::size_t i, std::string_view name) const {
  step_count(i);
  const std::vector<std::string> names = state_names();
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k] != name) continue;
    static const Tensor kNone;
    return k < slots_[i].state.size() ? slots_[i].state[k] : kNone;
  }
  MIXPREC_CHECK(false, "[", type_name(), "] keeps no state named '", name, "'");
  return slots_[i].master;  // unreachable
}

void Optimizer::reset_master_weights() {
  NoGrad no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (slots_[i].master.defined()) slots_[i].master.copy_(params_[i]);
}

bool Optimizer::prepare(std::size_t i, kernels::OptimOperands& ops, bool& fresh) {
  const Tensor& p = params_[i];
  const Tensor g = p.grad();
  if (!g.defined()) return false;
  Slot& slot = slots_[i];
  const std::vector<std::string> names = state_names();
  fresh = slot.state.size() != names.size();
  if (fresh) {
    slot.state.clear();
    for (std::size_t k = 0; k < names.size(); ++k)
      slot.state.push_back(companion(p, state_dtype(p)));
  }
  if (is_16bit(p.dtype()) && !slot.master.defined()) slot.master = companion(p, DType::F32, p);
  ++slot.step;
  p.storage()->bump_version();  // the update writes p in place: casts cached from it are stale
  ops.param = p;
  ops.grad = g;
  ops.master = slot.master;
  ops.state0 = names.size() > 0 ? slot.state[0] : Tensor();
  ops.state1 = names.size() > 1 ? slot.state[1] : Tensor();
  ops.rounding = rounding_;
  ops.stream = {seed_, static_cast<uint64_t>(slot.step), static_cast<uint64_t>(i)};
  return true;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  s.type = std::string(type_name());
  s.hyperparameters = hyperparameters();
  s.hyperparameters["rounding"] = rounding_ == Rounding::Stochastic ? 1.0 : 0.0;
  s.hyperparameters["num_params"] = static_cast<double>(params_.size());
  s.seed = seed_;
  const std::vector<std::string> names = state_names();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.step == 0) continue;
    const std::string prefix = std::to_string(i) + ".";
    s.tensors.emplace_back(prefix + "step",
                           Tensor::scalar(static_cast<double>(slot.step), DType::I64));
    if (slot.master.defined()) s.tensors.emplace_back(prefix + "master", slot.master);
    for (std::size_t k = 0; k < names.size() && k < slot.state.size(); ++k)
      s.tensors.emplace_back(prefix + names[k], slot.state[k]);
  }
  return s;
}

void Optimizer::validate_tensors(const OptimizerState& s, const std::string& op,
                                 std::vector<Slot>& loaded) const {
  const std::vector<std::string> names = state_names();
  std::vector<std::map<std::string, Tensor>> per_param(params_.size());
  for (const auto& [name, t] : s.tensors) {
    std::size_t i = 0;
    std::string field;
    MIXPREC_CHECK(split_name(name, i, field), op, "unexpected tensor name '", name,
                  "' (expected '<param index>.<field>')");
    MIXPREC_CHECK(i < params_.size(), op, "tensor '", name, "' names parameter ", i,
                  " but there are ", params_.size());
    const bool known = field == "step" || field == "master" ||
                       std::find(names.begin(), names.end(), field) != names.end();
    MIXPREC_CHECK(known, op, "unexpected tensor '", name, "' (", type_name(), " keeps step, master",
                  names.empty() ? "" : " and its state", ")");
    MIXPREC_CHECK(t.defined(), op, "tensor '", name, "' is undefined");
    MIXPREC_CHECK(per_param[i].emplace(field, t).second, op, "tensor '", name, "' appears twice");
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::map<std::string, Tensor>& fields = per_param[i];
    if (fields.empty()) continue;
    const Tensor& p = params_[i];
    const std::string prefix = std::to_string(i) + ".";
    const auto step = fields.find("step");
    MIXPREC_CHECK(step != fields.end(), op, "parameter ", i, " has state but no '", prefix,
                  "step'");
    MIXPREC_CHECK(step->second.dtype() == DType::I64 && step->second.numel() == 1, op, "'", prefix,
                  "step' must be one i64, got ", dtype_name(step->second.dtype()), " ",
                  shape_to_string(step->second.shape()));
    loaded[i].step = step->second.item<int64_t>();
    MIXPREC_CHECK(loaded[i].step >= 1, op, "'", prefix, "step' must be >= 1, got ", loaded[i].step);
    auto expect = [&](const std::string& field, DType dtype) {
      const auto it = fields.find(field);
      MIXPREC_CHECK(it != fields.end(), op, "'", prefix, field, "' is missing (parameter ", i,
                    " is ", dtype_name(p.dtype()), " ", shape_to_string(p.shape()), ")");
      const Tensor& t = it->second;
      MIXPREC_CHECK(t.dtype() == dtype, op, "'", prefix, field, "' has dtype ",
                    dtype_name(t.dtype()), ", expected ", dtype_name(dtype));
      MIXPREC_CHECK(t.shape() == p.shape(), op, "'", prefix, field, "' has shape ",
                    shape_to_string(t.shape()), ", expected the parameter's ",
                    shape_to_string(p.shape()));
      return t;
    };
    if (is_16bit(p.dtype())) {
      loaded[i].master = expect("master", DType::F32);
    } else {
      MIXPREC_CHECK(fields.count("master") == 0, op, "'", prefix,
                    "master' given for a parameter of dtype ", dtype_name(p.dtype()),
                    " (master weights are for f16/bf16 parameters)");
    }
    for (const std::string& name : names) loaded[i].state.push_back(expect(name, state_dtype(p)));
  }
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  const std::string op = "[" + std::string(type_name()) + "] load_state_dict: ";
  MIXPREC_CHECK(s.type == type_name(), op, "the state is for a ", s.type.empty() ? "?" : s.type,
                " optimizer, not ", type_name());
  std::map<std::string, double> hp = hyperparameters();
  for (auto& [key, value] : hp) {
    const auto it = s.hyperparameters.find(key);
    MIXPREC_CHECK(it != s.hyperparameters.end(), op, "hyper-parameter '", key, "' is missing");
    value = it->second;
  }
  for (const char* key : {"rounding", "num_params"})
    MIXPREC_CHECK(s.hyperparameters.count(key) == 1, op, "hyper-parameter '", key, "' is missing");
  const double rounding = s.hyperparameters.at("rounding");
  MIXPREC_CHECK(rounding == 0.0 || rounding == 1.0, op, "'rounding' must be 0 or 1, got ",
                rounding);
  MIXPREC_CHECK(s.hyperparameters.at("num_params") == static_cast<double>(params_.size()), op,
                "the state has ", s.hyperparameters.at("num_params"),
                " parameters, this optimizer has ", params_.size());

  // The saved hyper-parameters decide which state tensors exist (SGD's momentum), so they are
  // set first and put back if anything below fails: a bad state changes nothing.
  const std::map<std::string, double> previous = hyperparameters();
  try {
    set_hyperparameters(hp);
  } catch (const Error& e) {
    throw Error(op + "saved hyper-parameters rejected: " + e.what());
  }
  std::vector<Slot> loaded(params_.size());
  try {
    validate_tensors(s, op, loaded);
  } catch (...) {
    set_hyperparameters(previous);
    throw;
  }

  NoGrad no_grad;
  rounding_ = rounding == 1.0 ? Rounding::Stochastic : Rounding::NearestEven;
  seed_ = s.seed;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Slot& slot = slots_[i];
    const Tensor& p = params_[i];
    slot = Slot{};
    if (loaded[i].step == 0) continue;
    slot.step = loaded[i].step;
    if (loaded[i].master.defined()) slot.master = companion(p, DType::F32, loaded[i].master);
    for (const Tensor& t : loaded[i].state) slot.state.push_back(companion(p, t.dtype(), t));
  }
}

}  // namespace mixprec::optim
