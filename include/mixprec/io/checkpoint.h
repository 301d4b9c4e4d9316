#pragma once
// Training checkpoints: model, optimizer and loss scaler in ONE safetensors file, written
// atomically (temporary file + fsync + rename: a crash leaves the previous checkpoint intact).
//
//   tensors       "model.<name>"    the module's state_dict() in its own dtypes
//                 "optim.<i>.step" "optim.<i>.master" "optim.<i>.exp_avg" ...  (optimizer.h)
//   __metadata__  "format"             "mixprec.checkpoint"
//                 "mixprec.version"    "1"
//                 "mixprec.optimizer"  {"type": "AdamW", "seed": 7, "hyperparameters": {...}}
//                 "mixprec.scaler"     {"scale": 65536, "growth_tracker": 12, ...} (if given)
//                 "mixprec.step"       the largest per-parameter step count, for humans
//                 anything else        the caller's own metadata (precision, data position,
//                                      ...), returned by load_checkpoint; keys starting with
//                                      "mixprec." and "format" are reserved
// Numbers are written with the shortest text that reads back as the same double, so a resumed
// run continues bit for bit: same weights, master weights, moments, step counts (and with
// them the stochastic-rounding stream) and loss scale.
#include <string>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/nn/module.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::io {

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler* scaler = nullptr,
                     const SafetensorsMetadata& metadata = {});

// Loads into existing objects built like the saved ones (same architecture, dtypes and
// optimizer type). The file is validated (names, shapes, dtypes, metadata) before anything is
// written into the model or the optimizer; a mismatch throws "[checkpoint] <path>: ...".
// A scaler passed here requires scaler state in the file; a file's scaler state is ignored
// when none is passed. Returns the caller's metadata as saved.
SafetensorsMetadata load_checkpoint(const std::string& path, nn::Module& model,
                                    optim::Optimizer& optimizer, amp::GradScaler* scaler = nullptr);

}  // namespace mixprec::io
