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
//
// Controls (issue #15):
//   grad_accum N      a step runs N micro-batches of `batch` sequences and takes one optimizer
//                     step: micro-batch k of step i is the k-th slice of batch i at batch size
//                     N x batch (TextDataset's stream), each loss weighted 1/N, so the step
//                     equals one on the N-times larger batch up to rounding. With 16-bit
//                     parameters the gradients are summed in f32 between micro-batches.
//   checkpoint_activations   GPT::set_activation_checkpointing (memory for compute).
//   rounding          nearest-even or stochastic rounding of the f32 master weights into 16-bit
//                     parameters (AdamW; seeded by `seed`).
//   fallback_after    f16 training that keeps overflowing switches to bf16 (see fall_back()).
//
// Data parallel (issue #20): with `world` distributed (mpirun -np N), `batch` is each rank's
// share and the step is the one a single process takes on N x batch: micro-batch k of step i on
// rank r is the r-th slice of the single process's micro-batch (TextDataset's stream), the
// gradients are averaged over ranks in f32 (nn::DataParallel, bucketed behind backward), every
// rank's scaler skips a step any rank overflowed, and step() and evaluate() return the mean
// over every rank's sequences. The weights must start equal (DataParallel::broadcast_parameters).
#include <cstdint>
#include <memory>
#include <string>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/text_dataset.h"
#include "mixprec/nn/data_parallel.h"
#include "mixprec/optim/adam.h"

namespace mixprec::models {

struct GPTTrainOptions {
  amp::PrecisionConfig precision;
  int64_t batch = 8;
  double lr = 6e-4;  // peak; linear warm-up then cosine decay to 10%
  int64_t warmup = 50;
  int64_t total_steps = 1000;  // for the decay
  double weight_decay = 0.1;
  double clip = 1.0;                    // gradient-norm threshold; 0 turns it off
  uint64_t seed = 0;                    // of the batch stream and of stochastic rounding
  int64_t grad_accum = 1;               // micro-batches per optimizer step
  bool checkpoint_activations = false;  // per transformer block
  optim::Rounding rounding = optim::Rounding::NearestEven;  // into 16-bit parameters
  double loss_scale = 65536.0;  // initial scale of dynamic loss scaling (f16 only)
  // f16 with loss scaling only: after this many optimizer steps in a row skipped for overflow,
  // or on a skipped step with the scale already at its floor (GradScalerOptions::min_scale), the
  // trainer falls back to bf16 by itself. 0: never.
  int64_t fallback_after = 0;
  // The ranks training together (not owned; outlives the trainer); null or a world of one: alone.
  const Communicator* world = nullptr;
  nn::DataParallelOptions data_parallel{};
};

// The trainer's settings as a user writes them, with their defaults: `mixprec train gpt` parses
// its flags into one and mixprec.gpt.Trainer its keywords (its defaults are these). options()
// checks them (an Error naming the setting) and makes the trainer's options, alone (no world).
struct GPTTrainSettings {
  std::string precision = "auto";  // amp::PrecisionConfig::parse's names
  int64_t batch = 8;
  double lr = 6e-4;
  int64_t warmup = 50;
  int64_t steps = 1000;
  double weight_decay = 0.1;
  double clip = 1.0;
  int64_t seed = 0;
  int64_t grad_accum = 1;
  bool checkpoint_activations = false;
  std::string rounding = "nearest";  // | "stochastic"
  double loss_scale = 65536.0;
  int64_t fallback_after = 10;
  GPTTrainOptions options() const;
};

// bf16 in place of f16 with the same parameter storage class: fp16 -> bf16 (autocast, f32
// parameters), fp16-params -> bf16-params; neither scales the loss (bf16 has f32's range).
amp::PrecisionConfig bf16_fallback_of(const amp::PrecisionConfig& p);

class GPTTrainer {
 public:
  // Converts `model` to the configuration's parameter dtype; build it with f32 parameters.
  GPTTrainer(GPT& model, const TextDataset& data, GPTTrainOptions options);

  // One optimizer step on batch `index` (grad_accum micro-batches); returns its (unscaled,
  // f32) loss, the mean over the micro-batches. With fallback_after set, a step may end by
  // falling back to bf16 (fell_back_at_last_step()).
  double step(int64_t index);
  // Mean loss over `batches` validation batches of batch x grad_accum sequences (in
  // micro-batches, no gradients, same autocast as training).
  double evaluate(int64_t batches, uint64_t seed = 1);
  double learning_rate(int64_t index) const;

  // Switches f16 training to bf16_fallback_of(precision) now: 16-bit parameters are converted
  // (from their f32 master weights where they have one, so nothing is rounded twice), the
  // optimizer is rebuilt over them with its state carried over (steps, moments, masters), and
  // loss scaling is turned off. `why` is kept for fallback_reason(). An Error unless training
  // in f16.
  void fall_back(std::string why);
  // Whether the last step() ended with an automatic fall_back(), and why ("8 steps in a row
  // skipped for overflow" / "the loss scale reached its floor 1").
  // Whether the loss scaler skipped the last step for overflow (true for the step that
  // triggered a fallback, though the scaler is then a new one).
  bool last_step_skipped() const { return last_step_skipped_; }
  bool fell_back_at_last_step() const { return fell_back_at_last_step_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // The precision training runs in now (options().precision until a fallback).
  const amp::PrecisionConfig& precision() const { return precision_; }

  // Rebuilt by fall_back(): take it again after a fallback rather than keeping the reference.
  optim::AdamW& optimizer() { return *optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  const GPTTrainOptions& options() const { return options_; }
  // The gradient reduction of a data-parallel run (its times, the replica check); null alone.
  const nn::DataParallel* data_parallel() const { return data_parallel_.get(); }

 private:
  Tensor forward_loss(const TokenBatch& batch);
  void widen_gradients_to_f32();
  void maybe_fall_back(double scale_before);
  void build_optimizer();  // and the data-parallel reduction over its parameters
  // Index of this rank's micro-batch `k` of step `index` in the stream of `options_.batch`-sized
  // batches, and the number of ranks.
  int64_t shard_index(int64_t micro_index) const;
  int64_t ranks() const;
  // `value` (this rank's mean over its equal share) averaged over ranks: the global mean.
  double mean_over_ranks(double value) const;

  GPT& model_;
  const TextDataset& data_;
  GPTTrainOptions options_;
  amp::PrecisionConfig precision_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<nn::DataParallel> data_parallel_;  // over the optimizer's parameters
  amp::GradScaler scaler_;
  int64_t skipped_in_a_row_ = 0;
  bool fell_back_at_last_step_ = false, last_step_skipped_ = false;
  std::string fallback_reason_;
};

}  // namespace mixprec::models
