#include "mixprec/nn/module.h"

#include <map>
#include <sstream>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::nn {

Tensor& Module::register_parameter(std::string name, Tensor value) {
  MIXPREC_CHECK(value.defined() && is_floating(value.dtype()), "[register_parameter] '", name,
                "' must be a defined floating tensor");
  value = value.detach();
  value.requires_grad_();
  parameters_.emplace_back(std::move(name), std::move(value));
  return parameters_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), value.detach());
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out) const {
  for (const auto& [name, t] : parameters ? parameters_ : buffers_)
    out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& [name, child] : children_) out.emplace_back(name, child.get());
  return out;
}

void Module::train(bool on) {
  apply([on](Module& m) { m.training_ = on; });
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->apply(fn);
}

bool Module::is_norm_layer(const Module& m) {
  const std::string_view t = m.type_name();
  return t == "LayerNorm" || t == "GroupNorm" || t == "RMSNorm";
}

void Module::to(DType dtype, const std::function<bool(const Module&)>& keep_f32) {
  MIXPREC_CHECK(is_floating(dtype), "[Module::to] expected a floating dtype, got ",
                dtype_name(dtype));
  apply([&](Module& m) {
    if (keep_f32 && keep_f32(m)) return;
    NoGrad no_grad;
    for (auto& [name, p] : m.parameters_) {
      if (!is_floating(p.dtype()) || p.dtype() == dtype) continue;
      const bool wants_grad = p.requires_grad();
      p = p.to(dtype).detach();  // the module's own handle: every reference sees the new tensor
      if (wants_grad) p.requires_grad_();
    }
    for (auto& [name, b] : m.buffers_)
      if (is_floating(b.dtype()) && b.dtype() != dtype) b = b.to(dtype);
  });
}

void Module::to(MemoryFormat format) {
  apply([&](Module& m) {
    NoGrad no_grad;
    for (auto& [name, p] : m.parameters_) {
      if (p.dim() != 4 || p.is_contiguous(format)) continue;
      const bool wants_grad = p.requires_grad();
      p = p.contiguous(format).detach();
      if (wants_grad) p.requires_grad_();
    }
    for (auto& [name, b] : m.buffers_)
      if (b.defined() && b.dim() == 4) b = b.contiguous(format);
  });
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(std::move(entry));
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> incoming;
  for (const auto& [name, t] : state) incoming.emplace(name, &t);
  std::vector<std::string> missing, mismatched;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (target, source), once all are valid
  for (const auto& [name, target] : state_dict()) {
    const auto it = incoming.find(name);
    if (it == incoming.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& source = *it->second;
    if (source.shape() != target.shape())
      mismatched.push_back(name + " (file " + shape_to_string(source.shape()) + ", model " +
                           shape_to_string(target.shape()) + ")");
    // Converting between floating dtypes is what loading does; an integer or bool tensor where a
    // float weight belongs (or the reverse) is a wrong file, never something to convert.
    else if (is_floating(source.dtype()) != is_floating(target.dtype()))
      mismatched.push_back(name + " (file " + std::string(dtype_name(source.dtype())) + ", model " +
                           std::string(dtype_name(target.dtype())) + ")");
    else
      copies.emplace_back(target, &source);
    incoming.erase(it);
  }
  auto join = [](const std::vector<std::string>& names) {
    std::ostringstream s;
    for (std::size_t i = 0; i < names.size(); ++i) s << (i ? ", " : "") << names[i];
    return s.str();
  };
  MIXPREC_CHECK(mismatched.empty(),
                "[load_state_dict] shape or dtype mismatch: ", join(mismatched));
  if (strict) {
    std::vector<std::string> unexpected;
    for (const auto& [name, t] : incoming) unexpected.push_back(name);
    MIXPREC_CHECK(missing.empty() && unexpected.empty(), "[load_state_dict] missing keys: [",
                  join(missing), "]; unexpected keys: [", join(unexpected), "]");
  }
  // Only now, so a refused file leaves the module as it was.
  NoGrad no_grad;
  for (auto& [target, source] : copies)
    target.copy_(*source);  // converts the dtype: exact widening, RNE narrowing
}

}  // namespace mixprec::nn
