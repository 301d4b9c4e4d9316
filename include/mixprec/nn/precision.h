#pragma once
// A module's parameters in the storage dtype a PrecisionConfig asks for.
#include "mixprec/amp/precision_config.h"
#include "mixprec/nn/module.h"

namespace mixprec::nn {

// Converts `model` to `p.params` when that is a 16-bit dtype (norm layers stay f32 when
// p.keep_f32); a no-op for f32 parameters. Call it before building an optimizer over the
// parameters: Module::to replaces them.
void to_precision(Module& model, const amp::PrecisionConfig& p);

}  // namespace mixprec::nn
