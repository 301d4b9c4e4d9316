#include "mixprec/nn/precision.h"

#include <string>
#include <utility>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::nn {
namespace {

// Every descendant of `m` with its dotted name, parents first.
void collect_modules(Module& m, const std::string& prefix,
                     std::vector<std::pair<std::string, Module*>>& out) {
  for (const auto& [name, child] : m.named_children()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    out.emplace_back(full, child);
    collect_modules(*child, full, out);
  }
}

}  // namespace

std::vector<std::pair<std::string, Module*>> named_modules(Module& model) {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules(model, "", out);
  return out;
}

void to_precision(Module& model, const amp::PrecisionConfig& p) {
  if (p.half_params()) {
    if (p.keep_f32)
      model.to(p.params);  // Module::is_norm_layer keeps the norms f32
    else
      model.to(p.params, [](const Module&) { return false; });
  }
  if (!p.plan) return;
  // Every name is resolved before anything is converted: a plan for another model changes
  // nothing.
  const std::vector<std::pair<std::string, Module*>> modules = named_modules(model);
  std::vector<Module*> targets;
  std::string unknown;
  for (const amp::PlanLayer& layer : p.plan->layers) {
    Module* found = nullptr;
    for (const auto& [name, module] : modules)
      if (name == layer.name) found = module;
    if (found == nullptr) unknown += (unknown.empty() ? "'" : ", '") + layer.name + "'";
    targets.push_back(found);
  }
  if (!unknown.empty()) {
    std::string names;
    for (std::size_t i = 0; i < modules.size() && i < 24; ++i)
      names += (i ? ", " : "") + modules[i].first;
    if (modules.size() > 24) names += ", ...";
    throw Error("[precision plan] the model has no module " + unknown + "; its modules are " +
                (names.empty() ? std::string("(none)") : names));
  }
  for (std::size_t i = 0; i < targets.size(); ++i)
    targets[i]->to(p.plan->layers[i].dtype);  // norm layers inside stay f32, as in the presets
}

namespace {

// The first dtype of `params` that is not f32, else f32.
DType first_narrow_dtype(const std::vector<Tensor>& params) {
  for (const Tensor& p : params)
    if (p.dtype() != DType::F32) return p.dtype();
  return DType::F32;
}

}  // namespace

DType compute_dtype(const Module& module) { return first_narrow_dtype(module.parameters()); }

Tensor as_input_of(const Module& module, const Tensor& x) {
  if (!x.defined() || !is_floating(x.dtype())) return x;
  const std::vector<Tensor> params = module.parameters();  // walked once: a forward's hot path
  if (params.empty()) return x;
  const DType dtype = first_narrow_dtype(params);
  return x.dtype() == dtype ? x : x.to(dtype);
}

}  // namespace mixprec::nn
