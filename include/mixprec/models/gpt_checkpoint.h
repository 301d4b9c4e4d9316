#pragma once
// A GPT back from a training checkpoint (io/checkpoint.h) that `mixprec train gpt` or
// mixprec.gpt.Trainer.save wrote: the model at that step, for sampling or evaluation.
//
// The architecture is read from the file: vocab and d_model from the token embedding's shape,
// context from the position embedding's, layers from the block names, and the head count (the
// one size the shapes do not show) from the metadata key "heads" that both writers record.
// Parameters keep the checkpoint's dtypes bit for bit: f32, or 16-bit for the -params
// precisions (LayerNorms f32), exactly the model the trainer held.
#include <cstdint>
#include <memory>
#include <string>

#include "mixprec/models/gpt.h"

namespace mixprec::models {

inline constexpr const char* kGPTHeadsKey = "heads";

// heads > 0 overrides the file's (for checkpoints written without the key). Throws
// "[load_gpt] <path>: ..." for a file that is not a GPT checkpoint or lacks what it needs.
std::unique_ptr<GPT> load_gpt(const std::string& checkpoint, int64_t heads = 0);

// The trainer's true weights, all in f32: a checkpoint of 16-bit parameters (bf16-params,
// fp16-params) gives its optimizer's f32 master weights ("optim.<i>.master", i in the order of
// parameters()), where the 16 bits only round them; an f32 checkpoint gives its parameters. What
// a precision planner measures. A 16-bit parameter without a master (no step taken) is widened.
std::unique_ptr<GPT> load_gpt_f32(const std::string& checkpoint);

}  // namespace mixprec::models
