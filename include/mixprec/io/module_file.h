#pragma once
// A module's state dict to and from a safetensors file (names as in state_dict()). Training
// checkpoints, which add the optimizer and the loss scaler, are io/checkpoint.h.
#include <string>

#include "mixprec/io/safetensors.h"
#include "mixprec/nn/module.h"

namespace mixprec::io {

// Writes parameters and buffers atomically (temporary file, then rename).
void save_module(const nn::Module& module, const std::string& path,
                 const SafetensorsMetadata& metadata = {});

// Loads into the module's own tensors, converting dtypes (exact widening, round-to-nearest-even
// narrowing); missing/unexpected names and shape mismatches are an Error naming them.
void load_module(nn::Module& module, const std::string& path, bool strict = true);

}  // namespace mixprec::io
