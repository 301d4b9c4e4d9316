#pragma once
// A module's parameters in the storage dtype a PrecisionConfig asks for.
#include <string>
#include <utility>
#include <vector>

#include "mixprec/amp/precision_config.h"
#include "mixprec/nn/module.h"

namespace mixprec::nn {

// Converts `model` to `p.params` when that is a 16-bit dtype (norm layers stay f32 when
// p.keep_f32); a no-op for f32 parameters. With a per-layer plan (p.plan) each module it names
// is converted to its planned dtype (Module::to, norm layers inside stay f32); a name the model
// does not have is an Error listing its modules, thrown before anything is converted. Call it
// before building an optimizer over the parameters: Module::to replaces them.
void to_precision(Module& model, const amp::PrecisionConfig& p);

// Every submodule with its dotted name ("h.0", "h.0.attn", ...), parents first.
std::vector<std::pair<std::string, Module*>> named_modules(Module& model);

}  // namespace mixprec::nn
