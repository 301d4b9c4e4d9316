#include "mixprec/models/gpt_train.h"

#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/precision.h"
#include "mixprec/optim/lr_schedule.h"

namespace mixprec::models {

namespace {

optim::AdamW make_optimizer(GPT& model, const GPTTrainOptions& o) {
  nn::to_precision(model, o.precision);  // before the optimizer takes the parameters
  return optim::AdamW(model.parameters(), {.lr = o.lr, .weight_decay = o.weight_decay});
}

}  // namespace

GPTTrainer::GPTTrainer(GPT& model, const TextDataset& data, GPTTrainOptions options)
    : model_(model),
      data_(data),
      options_(options),
      optimizer_(make_optimizer(model, options)),
      scaler_(options.precision.scaler_options()) {
  MIXPREC_CHECK(options.batch >= 1 && options.warmup >= 1 && options.total_steps >= 1,
                "[GPTTrainer] batch, warmup and total_steps must be >= 1");
}

double GPTTrainer::learning_rate(int64_t index) const {
  return optim::warmup_cosine_lr(options_.lr, index, options_.warmup, options_.total_steps);
}

Tensor GPTTrainer::forward_loss(const TokenBatch& batch) {
  // With 16-bit parameters every product already runs in their dtype; an autocast region
  // would only widen the 16-bit residual stream into f32 copies for the LayerNorms and the
  // loss (which keep f32 statistics in registers anyway), and backward would keep those copies.
  const amp::PrecisionConfig& p = options_.precision;
  const bool autocast_on = p.autocast() && !p.half_params();
  amp::Autocast autocast(autocast_on ? p.compute : DType::BF16, autocast_on);
  return model_.loss(batch.inputs, batch.targets);
}

double GPTTrainer::step(int64_t index) {
  optimizer_.set_lr(learning_rate(index));
  const TokenBatch batch =
      data_.batch_at(Split::Train, options_.batch, model_.config().context, options_.seed, index);
  const Tensor loss = forward_loss(batch);
  scaler_.scale(loss).backward();
  scaler_.unscale(optimizer_);
  if (options_.clip > 0) nn::clip_grad_norm(model_.parameters(), options_.clip);
  scaler_.step(optimizer_);
  scaler_.update();
  optimizer_.zero_grad();
  return loss.item<double>();
}

double GPTTrainer::evaluate(int64_t batches, uint64_t seed) {
  NoGrad no_grad;
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i)
    sum += forward_loss(
               data_.batch_at(Split::Validation, options_.batch, model_.config().context, seed, i))
               .item<double>();
  return sum / static_cast<double>(std::max<int64_t>(1, batches));
}

}  // namespace mixprec::models
