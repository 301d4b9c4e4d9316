#include "mixprec/models/gpt_train.h"

#include <algorithm>
#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
#include "mixprec/optim/lr_schedule.h"

namespace mixprec::models {

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
          .data_parallel = {},
          .graph = graph};
}

GPTTrainer::GPTTrainer(GPT& model, const TextDataset& data, GPTTrainOptions options)
    : model_(model),
      data_(data),
      options_(options),
      optimizer_(model, {.precision = options.precision,
                         .lr = options.lr,
                         .weight_decay = options.weight_decay,
                         .clip = options.clip,
                         .rounding = options.rounding,
                         .seed = options.seed,
                         .loss_scale = options.loss_scale,
                         .fallback_after = options.fallback_after,
                         .world = options.world,
                         .data_parallel = options.data_parallel}) {
  MIXPREC_CHECK(options.batch >= 1 && options.warmup >= 1 && options.total_steps >= 1 &&
                    options.grad_accum >= 1 && options.fallback_after >= 0,
                "[GPTTrainer] batch, warmup, total_steps and grad_accum must be >= 1, "
                "fallback_after >= 0");
  model_.set_activation_checkpointing(options.checkpoint_activations);
  MIXPREC_CHECK(!options.graph || optimizer_.ranks() == 1,
                "[GPTTrainer] graph replay trains alone: its gradients are not reduced over "
                "ranks; drop the graph option under mpirun");
}

int64_t GPTTrainer::shard_index(int64_t micro_index) const {
  // The single process's batch `micro_index` of ranks x batch sequences, sliced by rank.
  const int64_t rank = options_.world != nullptr ? options_.world->rank() : 0;
  return micro_index * optimizer_.ranks() + rank;
}

double GPTTrainer::mean_over_ranks(double value) const {
  if (optimizer_.ranks() == 1) return value;
  return options_.world->all_reduce_sum(value) / static_cast<double>(optimizer_.ranks());
}

double GPTTrainer::learning_rate(int64_t index) const {
  return optim::warmup_cosine_lr(options_.lr, index, options_.warmup, options_.total_steps);
}

Tensor GPTTrainer::forward_loss(const TokenBatch& batch) {
  // With 16-bit parameters every product already runs in their dtype; an autocast region
  // would only widen the 16-bit residual stream into f32 copies for the LayerNorms and the
  // loss (which keep f32 statistics in registers anyway), and backward would keep those copies.
  const amp::PrecisionConfig& p = optimizer_.precision();
  const bool autocast_on = p.autocast() && !p.half_params();
  amp::Autocast autocast(autocast_on ? p.compute : DType::BF16, autocast_on);
  return model_.loss(batch.inputs, batch.targets);
}

double GPTTrainer::step(int64_t index) {
  optimizer_.begin(learning_rate(index));
  const int64_t n = options_.grad_accum;
  double loss_sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    // Micro-batch k of step `index` holds the sequences k*batch .. (k+1)*batch - 1 of batch
    // `index` at batch size n*batch: the stream draws a fixed number of words per sequence.
    const TokenBatch batch = data_.batch_at(Split::Train, options_.batch, model_.config().context,
                                            options_.seed, shard_index(index * n + k));
    if (options_.graph) {
      loss_sum += replay_micro_batch(batch, k, n);
      continue;
    }
    const Tensor loss = forward_loss(batch);
    loss_sum += loss.item<double>();
    optimizer_.backward(loss, k, n);
  }
  optimizer_.step();
  return mean_over_ranks(loss_sum / static_cast<double>(n));
}

double GPTTrainer::replay_micro_batch(const TokenBatch& batch, int64_t k, int64_t n) {
  // A graph holds the parameters it was captured with: a fallback to bf16 (or anything else
  // that replaced them, such as Module::to) makes it capture again.
  const std::vector<Tensor>& params = optimizer_.optimizer().params();
  bool same_parameters = step_graph_ != nullptr && graph_params_.size() == params.size();
  for (std::size_t i = 0; same_parameters && i < params.size(); ++i)
    same_parameters = params[i].storage().get() == graph_params_[i];
  if (!same_parameters) step_graph_.reset();
  if (step_graph_ == nullptr) {
    graph_params_.clear();
    for (const Tensor& p : params) graph_params_.push_back(p.storage().get());
    // What backward() does to the loss, as ops the capture records: weighted 1/n, times the
    // loss scale (an input: the scaler changes it between steps).
    const bool scaled = optimizer_.scaler().enabled();
    auto loss_fn = [this, n, scaled](const std::vector<Tensor>& in) {
      const Tensor loss = forward_loss({Tensor(), in[0], in[1]});
      Tensor weighted = n > 1 ? mul(loss, 1.0 / static_cast<double>(n)) : loss;
      if (scaled) weighted = mul(weighted.to(DType::F32), in[2]);
      return std::vector<Tensor>{weighted, loss};
    };
    graph::CaptureOptions capture;
    capture.autograd = true;
    capture.fuse_epilogues = false;  // a replay trains eager's bits, as decoding decodes them
    step_graph_ = std::make_unique<graph::CompiledFunction>(
        graph::with_gradients(loss_fn, params), capture);
  }
  const Tensor scale = Tensor::scalar(optimizer_.scaler().get_scale(), DType::F32);
  const std::vector<Tensor>& out = (*step_graph_)({batch.inputs, batch.targets, scale});
  optimizer_.take_gradients(
      {out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(params.size())}, k, n);
  return out.back().item<double>();
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
