#pragma once
// The optimizer side of a mixed-precision training step, one mechanism for every trainer
// (GPTTrainer, `mixprec video train`):
//   - AdamW over a module converted to the precision's parameter dtype (f32 master weights for
//     16-bit parameters, rounded into them to nearest-even or stochastically);
//   - dynamic loss scaling where the precision computes in f16;
//   - micro-batches (gradient accumulation): each loss weighted 1/n, 16-bit gradients summed in
//     f32 between micro-batches;
//   - under mpirun, the gradients averaged over ranks in f32 behind the last micro-batch's
//     backward (nn::DataParallel), and a step skipped on every rank if any rank overflowed;
//   - gradient-norm clipping;
//   - the f16 -> bf16 fallback: f16 training that keeps overflowing (fallback_after steps in a
//     row skipped, or a skipped step with the scale at its floor) switches to bf16 by itself.
//
//   models::MixedPrecisionOptimizer opt(model, {.precision = pc, .lr = 1e-3});
//   opt.begin(lr_of_this_step);
//   for (int64_t k = 0; k < n; ++k) opt.backward(loss_of_micro_batch(k), k, n);
//   opt.step();  // false: skipped (overflow)
#include <cstdint>
#include <memory>
#include <string>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/core/communicator.h"
#include "mixprec/nn/data_parallel.h"
#include "mixprec/nn/module.h"
#include "mixprec/optim/adam.h"

namespace mixprec::models {

struct MixedPrecisionOptimizerOptions {
  amp::PrecisionConfig precision;
  double lr = 1e-3;  // the initial one; begin() sets each step's
  double weight_decay = 0.0;
  double clip = 1.0;  // gradient-norm threshold; 0 turns it off
  optim::Rounding rounding = optim::Rounding::NearestEven;  // into 16-bit parameters
  uint64_t seed = 0;                                        // of stochastic rounding
  double loss_scale = 65536.0;  // initial scale of dynamic loss scaling (f16 only)
  // f16 only: after this many steps in a row skipped for overflow, or on a skipped step with the
  // scale already at its floor (GradScalerOptions::min_scale), fall back to bf16. 0: never.
  int64_t fallback_after = 0;
  // The ranks training together (not owned; outlives the optimizer); null or a world of one:
  // alone.
  const Communicator* world = nullptr;
  nn::DataParallelOptions data_parallel{};
};

// bf16 in place of f16 with the same parameter storage class: fp16 -> bf16 (autocast, f32
// parameters), fp16-params -> bf16-params; neither scales the loss (bf16 has f32's range).
amp::PrecisionConfig bf16_fallback_of(const amp::PrecisionConfig& p);
bool trains_in_f16(const amp::PrecisionConfig& p);

class MixedPrecisionOptimizer {
 public:
  // Converts `model` to the precision's parameter dtype (build it with f32 parameters). Under a
  // distributed world the weights must already be equal on every rank.
  MixedPrecisionOptimizer(nn::Module& model, MixedPrecisionOptimizerOptions options);

  // Starts a step at learning rate `lr`.
  void begin(double lr);
  // Backward of micro-batch `k` of `n` (its loss weighted 1/n and scaled).
  void backward(const Tensor& loss, int64_t k, int64_t n);
  // Micro-batch `k` of `n`'s gradients computed elsewhere (a replayed graph; one per parameter
  // in parameters() order, of the loss weighted 1/n and scaled, as backward() has it), taken as backward() would
  // leave them: the first micro-batch's as they are (n = 1: views of the graph's arena, valid
  // until its next run) or widened to f32, later ones added in f32. Alone only (no ranks).
  void take_gradients(const std::vector<Tensor>& grads, int64_t k, int64_t n);
  // Ends the step: the reduction over ranks, unscaling, clipping, the AdamW step or a skip, the
  // scale's update, gradients cleared, and maybe the fallback. Returns whether the step was taken.
  bool step();

  // Switches f16 training to bf16_fallback_of(precision()) now: 16-bit parameters are converted
  // (from their f32 master weights where they have one, so nothing is rounded twice), the
  // optimizer is rebuilt over them with its state carried over (steps, moments, masters), and
  // loss scaling is turned off. `why` is kept for fallback_reason(). An Error unless training
  // in f16.
  void fall_back(std::string why);

  // Whether the loss scaler skipped the last step for overflow (true for the step that
  // triggered a fallback, though the scaler is then a new one).
  bool last_step_skipped() const { return last_step_skipped_; }
  // Whether the last step() ended with an automatic fall_back(), and why ("8 steps in a row
  // skipped for overflow" / "the loss scale reached its floor 1"; "" before any fallback).
  bool fell_back_at_last_step() const { return fell_back_at_last_step_; }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // The precision training runs in now (options().precision until a fallback).
  const amp::PrecisionConfig& precision() const { return precision_; }

  // Rebuilt by fall_back(): take it again after a fallback rather than keeping the reference.
  optim::AdamW& optimizer() { return *optimizer_; }
  const optim::AdamW& optimizer() const { return *optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  const MixedPrecisionOptimizerOptions& options() const { return options_; }
  // The gradient reduction of a data-parallel run (its times, the replica check); null alone.
  const nn::DataParallel* data_parallel() const { return data_parallel_.get(); }
  int64_t ranks() const;

 private:
  void build_optimizer();  // and the data-parallel reduction over its parameters
  void widen_gradients_to_f32();
  void maybe_fall_back(double scale_before);

  nn::Module& model_;
  MixedPrecisionOptimizerOptions options_;
  amp::PrecisionConfig precision_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<nn::DataParallel> data_parallel_;  // over the optimizer's parameters
  amp::GradScaler scaler_;
  double scale_before_ = 0;
  int64_t skipped_in_a_row_ = 0;
  bool fell_back_at_last_step_ = false, last_step_skipped_ = false;
  std::string fallback_reason_;
};

}  // namespace mixprec::models
