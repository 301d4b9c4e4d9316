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
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/graph/graph.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/mixed_precision_optimizer.h"
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
  // Each micro-batch's forward and backward replayed from a captured graph (graph::
  // with_gradients, captured at the first step and again after a fallback): no op front-end
  // walked, every activation and gradient in one planned arena, nothing allocated. The
  // gradients, the loss and so the training are the same bits as eager. Alone only (no ranks).
  bool graph = false;
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
  bool graph = false;  // GPTTrainOptions::graph
  GPTTrainOptions options() const;
};

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

  // The f16 -> bf16 fallback, by hand (MixedPrecisionOptimizer::fall_back).
  void fall_back(std::string why) { optimizer_.fall_back(std::move(why)); }
  bool last_step_skipped() const { return optimizer_.last_step_skipped(); }
  bool fell_back_at_last_step() const { return optimizer_.fell_back_at_last_step(); }
  const std::string& fallback_reason() const { return optimizer_.fallback_reason(); }
  // The precision training runs in now (options().precision until a fallback).
  const amp::PrecisionConfig& precision() const { return optimizer_.precision(); }

  // Rebuilt by fall_back(): take it again after a fallback rather than keeping the reference.
  optim::AdamW& optimizer() { return optimizer_.optimizer(); }
  amp::GradScaler& scaler() { return optimizer_.scaler(); }
  const GPTTrainOptions& options() const { return options_; }
  // The gradient reduction of a data-parallel run (its times, the replica check); null alone.
  const nn::DataParallel* data_parallel() const { return optimizer_.data_parallel(); }
  MixedPrecisionOptimizer& mixed_precision() { return optimizer_; }
  // Turns graph replay on or off from the next step (the same bits either way); a graph
  // captured already is kept.
  void set_graph_replay(bool on) { options_.graph = on; }
  // With options().graph, the graph the last micro-batch replayed (nullptr before the first).
  const graph::Graph* step_graph() const {
    return step_graph_ != nullptr ? step_graph_->last() : nullptr;
  }

 private:
  Tensor forward_loss(const TokenBatch& batch);
  // Micro-batch k of n by replaying step_graph_ (capturing it first); returns its loss.
  double replay_micro_batch(const TokenBatch& batch, int64_t k, int64_t n);
  // Index of this rank's micro-batch `k` of step `index` in the stream of `options_.batch`-sized
  // batches.
  int64_t shard_index(int64_t micro_index) const;
  // `value` (this rank's mean over its equal share) averaged over ranks: the global mean.
  double mean_over_ranks(double value) const;

  GPT& model_;
  const TextDataset& data_;
  GPTTrainOptions options_;
  MixedPrecisionOptimizer optimizer_;  // AdamW, loss scaling, accumulation, fallback
  // With options_.graph: a micro-batch's forward and backward, {tokens, targets, loss scale} ->
  // {scaled loss, gradients..., loss} (graph::with_gradients).
  std::unique_ptr<graph::CompiledFunction> step_graph_;
  std::vector<const Storage*> graph_params_;  // the parameters step_graph_ was captured with
};

}  // namespace mixprec::models
