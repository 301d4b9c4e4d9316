#pragma once
// Mixed-precision training of a GPT on a text corpus, one optimizer step at a time: what
// `mixprec train gpt`, `mixprec bench train` and the precision-parity test share.
//
// A step: batch `index` of the seeded stream (so a resumed run draws the same batches), the
// forward under the configuration's autocast (if any), the loss scaled (f16), backward,
// unscale, gradient clipping, a skipped or taken AdamW step, the scale updated.
// With 16-bit parameters (PrecisionConfig::half_params) the model is converted first
// (LayerNorms keep f32 parameters), AdamW keeps f32 master weights, and the forward runs
// without an autocast region, as PyTorch's model.to(bfloat16): the LayerNorms take the 16-bit
// residual stream and write their output in its dtype (f32 statistics, one rounding), the loss
// widens the 16-bit logits itself and returns f32.
#include <cstdint>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/text_dataset.h"
#include "mixprec/optim/adam.h"

namespace mixprec::models {

struct GPTTrainOptions {
  amp::PrecisionConfig precision;
  int64_t batch = 8;
  double lr = 6e-4;  // peak; linear warm-up then cosine decay to 10%
  int64_t warmup = 50;
  int64_t total_steps = 1000;  // for the decay
  double weight_decay = 0.1;
  double clip = 1.0;  // gradient-norm threshold; 0 turns it off
  uint64_t seed = 0;  // of the batch stream
};

class GPTTrainer {
 public:
  // Converts `model` to the configuration's parameter dtype; build it with f32 parameters.
  GPTTrainer(GPT& model, const TextDataset& data, GPTTrainOptions options);

  // One optimizer step on batch `index`; returns its (unscaled, f32) loss.
  double step(int64_t index);
  // Mean loss over `batches` validation batches (no gradients, same autocast as training).
  double evaluate(int64_t batches, uint64_t seed = 1);
  double learning_rate(int64_t index) const;

  optim::AdamW& optimizer() { return optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  const GPTTrainOptions& options() const { return options_; }

 private:
  Tensor forward_loss(const TokenBatch& batch);
  GPT& model_;
  const TextDataset& data_;
  GPTTrainOptions options_;
  optim::AdamW optimizer_;
  amp::GradScaler scaler_;
};

}  // namespace mixprec::models
