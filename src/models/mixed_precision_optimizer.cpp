#include "mixprec/models/mixed_precision_optimizer.h"

#include <utility>

#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/precision.h"
#include "mixprec/ops/arith.h"

namespace mixprec::models {

namespace {

amp::GradScalerOptions scaler_options(const amp::PrecisionConfig& p,
                                      const MixedPrecisionOptimizerOptions& o) {
  amp::GradScalerOptions s = p.scaler_options();
  s.init_scale = o.loss_scale;
  return s;
}

}  // namespace

bool trains_in_f16(const amp::PrecisionConfig& p) {
  return p.compute == DType::F16 || p.params == DType::F16;
}

amp::PrecisionConfig bf16_fallback_of(const amp::PrecisionConfig& p) {
  amp::PrecisionConfig b = p;
  if (b.compute == DType::F16) b.compute = DType::BF16;
  if (b.params == DType::F16) b.params = DType::BF16;
  b.loss_scaling = amp::LossScaling::None;
  return b;
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(nn::Module& model,
                                                 MixedPrecisionOptimizerOptions options)
    : model_(model),
      options_(std::move(options)),
      precision_(options_.precision),
      scaler_(scaler_options(options_.precision, options_)) {
  MIXPREC_CHECK(options_.fallback_after >= 0,
                "[MixedPrecisionOptimizer] fallback_after must be "
                ">= 0, got ",
                options_.fallback_after);
  nn::to_precision(model_, precision_);  // before the optimizer takes the parameters
  build_optimizer();
}

void MixedPrecisionOptimizer::build_optimizer() {
  data_parallel_.reset();  // its hooks sit on the parameters the old optimizer held
  optimizer_ = std::make_unique<optim::AdamW>(
      model_.parameters(), optim::AdamWOptions{.lr = options_.lr,
                                               .weight_decay = options_.weight_decay,
                                               .rounding = options_.rounding,
                                               .seed = options_.seed});
  if (ranks() > 1)
    data_parallel_ = std::make_unique<nn::DataParallel>(*options_.world, optimizer_->params(),
                                                        options_.data_parallel);
}

int64_t MixedPrecisionOptimizer::ranks() const {
  return options_.world != nullptr ? options_.world->size() : 1;
}

void MixedPrecisionOptimizer::begin(double lr) {
  fell_back_at_last_step_ = false;
  scale_before_ = scaler_.get_scale();
  optimizer_->set_lr(lr);
}

void MixedPrecisionOptimizer::backward(const Tensor& loss, int64_t k, int64_t n) {
  MIXPREC_CHECK(n >= 1 && k >= 0 && k < n, "[MixedPrecisionOptimizer] micro-batch ", k, " of ", n);
  const Tensor weighted = n > 1 ? mul(loss, 1.0 / static_cast<double>(n)) : loss;
  // The reduction runs behind the last micro-batch's backward, on the sum of all of them.
  if (data_parallel_ && k + 1 == n) data_parallel_->expect_gradients();
  scaler_.scale(weighted).backward();
  if (k + 1 < n) widen_gradients_to_f32();
}

void MixedPrecisionOptimizer::take_gradients(const std::vector<Tensor>& grads, int64_t k,
                                             int64_t n) {
  MIXPREC_CHECK(n >= 1 && k >= 0 && k < n, "[MixedPrecisionOptimizer] micro-batch ", k, " of ", n);
  MIXPREC_CHECK(ranks() == 1, "[MixedPrecisionOptimizer] take_gradients: gradients from a "
                              "replayed graph are not reduced over ranks; train alone");
  const std::vector<Tensor>& params = optimizer_->params();
  MIXPREC_CHECK(grads.size() == params.size(), "[MixedPrecisionOptimizer] take_gradients: ",
                params.size(), " parameters, ", grads.size(), " gradients");
  NoGrad no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = grads[i];
    Tensor& grad = params[i].autograd_meta()->grad;
    if (!g.defined()) continue;
    if (n == 1) {
      grad = g;
    } else if (k == 0 || !grad.defined()) {
      // Widened (a 16-bit sum would round at every addition), and owned: the graph's arena
      // holds the next micro-batch's.
      grad = g.dtype() == DType::F16 || g.dtype() == DType::BF16 ? g.to(DType::F32) : g.clone();
    } else {
      grad = add(grad, g.to(grad.dtype()));
    }
  }
}

void MixedPrecisionOptimizer::widen_gradients_to_f32() {
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

bool MixedPrecisionOptimizer::step() {
  if (data_parallel_) data_parallel_->finish();
  scaler_.unscale(*optimizer_);
  if (data_parallel_) scaler_.agree_found_inf(data_parallel_->world());
  if (options_.clip > 0) nn::clip_grad_norm(model_.parameters(), options_.clip);
  scaler_.step(*optimizer_);
  scaler_.update();
  last_step_skipped_ = scaler_.last_step_skipped();
  optimizer_->zero_grad();
  maybe_fall_back(scale_before_);
  return !last_step_skipped_;
}

void MixedPrecisionOptimizer::maybe_fall_back(double scale_before) {
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

void MixedPrecisionOptimizer::fall_back(std::string why) {
  MIXPREC_CHECK(trains_in_f16(precision_), "[MixedPrecisionOptimizer] fall_back: training in ",
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

}  // namespace mixprec::models
