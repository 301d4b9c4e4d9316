#pragma once
// The per-layer precision planner for a GPT (`mixprec precision plan --model gpt`): for each
// transformer block it measures the error of the logits and of every parameter's gradient (of
// the cross entropy) when only that block stores its parameters in bf16 or f16 (the rest f32),
// on real batches of the corpus the model trains on, and the block's share of the forward
// time; then it picks per block the cheapest dtype whose larger error is within the budget
// (amp::choose_layer_dtype). The plan applies through nn::to_precision, the
// same Module::to(dtype) a block gets here while it is measured.
#include <cstdint>

#include "mixprec/amp/precision_plan.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/text_dataset.h"

namespace mixprec::models {

struct GPTPlanOptions {
  double budget = 0.01;  // relative RMS error (logits, gradients) vs all-f32 a block may cause
  int64_t batches = 2;   // training batches the error is measured on
  int64_t batch = 4;     // sequences per batch (of the model's context)
  uint64_t seed = 0;     // of the batch stream (TextDataset::batch_at)
  int repetitions = 5;   // timed forwards per block; the median counts
};

// Leaves `model` as it found it (f32 parameters, bit for bit). Throws when the model's
// parameters are not all f32 (plan from the f32 weights).
amp::PrecisionPlan plan_gpt_precision(GPT& model, const TextDataset& data,
                                      const GPTPlanOptions& options);

}  // namespace mixprec::models
