#include "mixprec/models/gpt_train.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/precision.h"
#include "mixprec/ops/arith.h"
#include "mixprec/optim/lr_schedule.h"

namespace mixprec::models {

namespace {

std::unique_ptr<optim::AdamW> make_optimizer(GPT& model, const GPTTrainOptions& o) {
  return std::make_unique<optim::AdamW>(
      model.parameters(),
      optim::AdamWOptions{
          .lr = o.lr, .weight_decay = o.weight_decay, .rounding = o.rounding, .seed = o.seed});
}

amp::GradScalerOptions scaler_options(const amp::PrecisionConfig& p, const GPTTrainOptions& o) {
  amp::GradScalerOptions s = p.scaler_options();
  s.init_scale = o.loss_scale;
  return s;
}

bool trains_in_f16(const amp::PrecisionConfig& p) {
  return p.compute == DType::F16 || p.params == DType::F16;
}

}  // namespace

amp::PrecisionConfig bf16_fallback_of(const amp::PrecisionConfig& p) {
  amp::PrecisionConfig b = p;
  if (b.compute == DType::F16) b.compute = DType::BF16;
  if (b.params == DType::F16) b.params = DType::BF16;
  b.loss_scaling = amp::LossScaling::None;
  return b;
}

GPTTrainOptions GPTTrainSettings::options() const {
  MIXPREC_CHECK(batch >= 1 && warmup >= 1 && steps >= 1 && grad_accum >= 1 && seed >= 0 &&
                    fallback_after >= 0,
                "[gpt trainer] batch, warmup, steps and grad_accum must be >= 1, seed and "
                "fallback_after >= 0");
  MIXPREC_CHECK(loss_scale > 0 && std::isfinite(loss_scale) && std::isfinite(lr) &&
                    std::isfinite(weight_decay) && std::isfinite(clip),
                "[gpt trainer] the loss scale must be a positive finite number, lr, weight decay "
                "and clip finite");
  MIXPREC_CHECK(rounding == "nearest" || rounding == "stochastic",
                "[gpt trainer] rounding must be nearest or stochastic, got '", rounding, "'");
  const amp::PrecisionConfig pc = amp::PrecisionConfig::parse(precision);
  MIXPREC_CHECK(rounding == "nearest" || pc.half_params(),
                "[gpt trainer] stochastic rounding rounds into 16-bit parameters, and precision ",
                precision, " keeps them in f32: use bf16-params or fp16-params");
  return {.precision = pc,
          .batch = batch,
          .lr = lr,
          .warmup = warmup,
          .total_steps = steps,
          .weight_decay = weight_decay,
          .clip = clip,
          .seed = static_cast<uint64_t>(seed),
          .grad_accum = grad_accum,
          .checkpoint_activations = checkpoint_activations,
          .rounding = rounding == "stochastic" ? optim::Rounding::Stochastic
                                               : optim::Rounding::NearestEven,
          .loss_scale = loss_scale,
          .fallback_after = fallback_after,
          .world = nullptr,
          .data_parallel = {}};
}

GPTTrainer::GPTTrainer(GPT& model, const TextDataset& data, GPTTrainOptions options)
    : model_(model),
      data_(data),
      options_(options),
      precision_(options.precision),
      scaler_(scaler_options(options.precision, options)) {
  MIXPREC_CHECK(options.batch >= 1 && options.warmup >= 1 && options.total_steps >= 1 &&
                    options.grad_accum >= 1 && options.fallback_after >= 0,
                "[GPTTrainer] batch, warmup, total_steps and grad_accum must be >= 1, "
                "fallback_after >= 0");
  nn::to_precision(model, precision_);  // before the optimizer takes the parameters
  build_optimizer();
  model_.set_activation_checkpointing(options.checkpoint_activations);
}

void GPTTrainer::build_optimizer() {
  data_parallel_.reset();  // its hooks sit on the parameters the old optimizer held
  optimizer_ = make_optimizer(model_, options_);
  if (ranks() > 1)
    data_parallel_ = std::make_unique<nn::DataParallel>(*options_.world, optimizer_->params(),
                                                        options_.data_parallel);
}

int64_t GPTTrainer::ranks() const {
  return options_.world != nullptr ? options_.world->size() : 1;
}

int64_t GPTTrainer::shard_index(int64_t micro_index) const {
  // The single process's batch `micro_index` of ranks() x batch sequences, sliced by rank.
  const int64_t rank = options_.world != nullptr ? options_.world->rank() : 0;
  return micro_index * ranks() + rank;
}

double GPTTrainer::mean_over_ranks(double value) const {
  if (ranks() == 1) return value;
  return options_.world->all_reduce_sum(value) / static_cast<double>(ranks());
}

double GPTTrainer::learning_rate(int64_t index) const {
  return optim::warmup_cosine_lr(options_.lr, index, options_.warmup, options_.total_steps);
}

Tensor GPTTrainer::forward_loss(const TokenBatch& batch) {
  // With 16-bit parameters every product already runs in their dtype; an autocast region
  // would only widen the 16-bit residual stream into f32 copies for the LayerNorms and the
  // loss (which keep f32 statistics in registers anyway), and backward would keep those copies.
  const amp::PrecisionConfig& p = precision_;
  const bool autocast_on = p.autocast() && !p.half_params();
  amp::Autocast autocast(autocast_on ? p.compute : DType::BF16, autocast_on);
  return model_.loss(batch.inputs, batch.targets);
}

void GPTTrainer::widen_gradients_to_f32() {
  // A 16-bit gradient summed over micro-batches in 16 bits would round at every addition (and
  // a scaled f16 one could overflow where the whole batch's would not); the engine adds the
  // next micro-batch's 16-bit gradient into an f32 .grad as it finds it.
  NoGrad no_grad;
  for (const Tensor& p : optimizer_->params()) {
    const Tensor g = p.grad();
    if (g.defined() && (g.dtype() == DType::F16 || g.dtype() == DType::BF16))
      p.autograd_meta()->grad = g.to(DType::F32);
  }
}

double GPTTrainer::step(int64_t index) {
  fell_back_at_last_step_ = false;
  const double scale_before = scaler_.get_scale();
  optimizer_->set_lr(learning_rate(index));
  const int64_t n = options_.grad_accum;
  double loss_sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    // Micro-batch k of step `index` holds the sequences k*batch .. (k+1)*batch - 1 of batch
    // `index` at batch size n*batch: the stream draws a fixed number of words per sequence.
    const TokenBatch batch = data_.batch_at(Split::Train, options_.batch, model_.config().context,
                                            options_.seed, shard_index(index * n + k));
    Tensor loss = forward_loss(batch);
    loss_sum += loss.item<double>();
    if (n > 1) loss = mul(loss, 1.0 / static_cast<double>(n));  // the mean over n micro-batches
    if (data_parallel_ && k + 1 == n) data_parallel_->expect_gradients();
    scaler_.scale(loss).backward();
    if (n > 1 && k + 1 < n) widen_gradients_to_f32();
  }
  if (data_parallel_) data_parallel_->finish();
  scaler_.unscale(*optimizer_);
  if (data_parallel_) scaler_.agree_found_inf(data_parallel_->world());
  if (options_.clip > 0) nn::clip_grad_norm(model_.parameters(), options_.clip);
  scaler_.step(*optimizer_);
  scaler_.update();
  last_step_skipped_ = scaler_.last_step_skipped();
  optimizer_->zero_grad();
  maybe_fall_back(scale_before);
  return mean_over_ranks(loss_sum / static_cast<double>(n));
}

void GPTTrainer::maybe_fall_back(double scale_before) {
  if (options_.fallback_after == 0 || !trains_in_f16(precision_)) return;
  if (!last_step_skipped_) {
    skipped_in_a_row_ = 0;
    return;
  }
  ++skipped_in_a_row_;
  const double floor = scaler_options(precision_, options_).min_scale;
  // A step skipped while the scale was already at its floor: the scale cannot shrink any
  // further, so waiting cannot help.
  const bool at_floor = scale_before <= floor;
  if (skipped_in_a_row_ >= options_.fallback_after)
    fall_back(std::to_string(skipped_in_a_row_) + " steps in a row skipped for overflow");
  else if (at_floor)
    fall_back("the loss scale reached its floor " + std::to_string(static_cast<int64_t>(floor)) +
              " and the step still overflowed");
  else
    return;
  fell_back_at_last_step_ = true;
}

void GPTTrainer::fall_back(std::string why) {
  MIXPREC_CHECK(trains_in_f16(precision_), "[GPTTrainer] fall_back: training in ",
                precision_.name(), ", not f16: there is nothing to fall back from");
  const amp::PrecisionConfig next = bf16_fallback_of(precision_);
  if (next.params != precision_.params) {
    // Module::to replaces the parameter tensors, so the optimizer is rebuilt over the new ones;
    // its state (f32 masters and moments) does not depend on the parameters' 16-bit dtype.
    const optim::OptimizerState state = optimizer_->state_dict();
    nn::to_precision(model_, next);
    build_optimizer();
    optimizer_->load_state_dict(state);
    // The masters are the true weights: round them once into bf16 rather than f16 -> bf16.
    NoGrad no_grad;
    const std::vector<Tensor>& params = optimizer_->params();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (optimizer_->master(i).defined())
        params[i].copy_(optimizer_->master(i).to(params[i].dtype()));
  }
  precision_ = next;
  scaler_ = amp::GradScaler(next.scaler_options());  // bf16: no scaling, nothing skipped
  skipped_in_a_row_ = 0;
  fallback_reason_ = std::move(why);
}

double GPTTrainer::evaluate(int64_t batches, uint64_t seed) {
  NoGrad no_grad;
  const int64_t n = options_.grad_accum;
  double sum = 0;
  for (int64_t i = 0; i < batches * n; ++i)
    sum += forward_loss(data_.batch_at(Split::Validation, options_.batch, model_.config().context,
                                       seed, shard_index(i)))
               .item<double>();
  return mean_over_ranks(sum / static_cast<double>(std::max<int64_t>(1, batches * n)));
}

}  // namespace mixprec::models
