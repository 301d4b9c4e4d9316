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

// The dtype a module computes in: that of its first parameter not in f32, else f32. Norm
// layers keep f32 parameters in 16-bit models, so a block is 16-bit when its weights are. A
// model whose modules a plan stores in several dtypes casts each planned module's input to it
// (as_input_of): otherwise an f32 stream would widen a bf16 module's weights and its products
// would run in f32.
DType compute_dtype(const Module& module);
// x in `module`'s compute dtype (x itself when it is already, is not floating, or the module
// has no parameters).
Tensor as_input_of(const Module& module, const Tensor& x);

// Every submodule with its dotted name ("h.0", "h.0.attn", ...), parents first.
std::vector<std::pair<std::string, Module*>> named_modules(Module& model);

}  // namespace mixprec::nn
