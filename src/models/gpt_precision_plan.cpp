#include "mixprec/models/gpt_precision_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "plan_measure.h"

namespace mixprec::models {

using plan_detail::kGradientScale;
using plan_detail::median_ms;
using plan_detail::relative_error;

amp::PrecisionPlan plan_gpt_precision(GPT& model, const TextDataset& data,
                                      const GPTPlanOptions& o) {
  MIXPREC_CHECK(o.batches >= 1 && o.batch >= 1 && o.repetitions >= 1 && o.budget >= 0,
                "[precision plan] batches, batch and repetitions must be >= 1, the budget >= 0");
  plan_detail::require_f32_parameters(model);
  const bool was_training = model.training();
  model.eval();
  const int64_t context = model.config().context, vocab = model.config().vocab;
  std::vector<TokenBatch> batches;
  for (int64_t i = 0; i < o.batches; ++i)
    batches.push_back(data.batch_at(Split::Train, o.batch, context, o.seed, i));

  // The logits of every batch, and every parameter's gradient of the summed loss.
  struct Outputs {
    std::vector<Tensor> logits, grads;
  };
  const auto run = [&] {
    Outputs out;
    for (const Tensor& p : model.parameters()) p.zero_grad();
    for (const TokenBatch& b : batches) {
      const Tensor logits = model.forward(b.inputs);
      const int64_t n = b.inputs.numel();
      mul(cross_entropy(logits.reshape({n, vocab}), b.targets.reshape({n})), kGradientScale)
          .backward();
      out.logits.push_back(logits.detach());
    }
    for (const Tensor& p : model.parameters()) {
      out.grads.push_back(p.grad().defined() ? div(p.grad().to(DType::F32), kGradientScale)
                                             : Tensor());
      p.zero_grad();
    }
    return out;
  };
  const Outputs reference = run();

  // The time share of each block: the blocks run one by one on the first batch's residual
  // stream, as GPT::hidden runs them, against the whole forward.
  NoGrad no_grad;
  const Tensor& tokens = batches[0].inputs;
  const double total_ms = median_ms(o.repetitions, [&] { (void)model.forward(tokens); });
  const Tensor positions = Tensor::arange(0.0, static_cast<double>(context), 1.0, DType::I64);
  Tensor x = add(embedding(model.wte(), tokens), embedding(model.wpe(), positions));

  amp::PrecisionPlan plan;
  plan.model = "gpt";
  plan.budget = o.budget;
  for (int64_t b = 0; b < model.config().layers; ++b) {
    GPTBlock& block = model.block(b);
    amp::PlanLayer layer;
    layer.name = "h." + std::to_string(b);
    Tensor next;
    layer.time_share = median_ms(o.repetitions, [&] { next = block.forward(x); });  // ms, here
    x = next;
    const nn::NamedTensors f32_state = block.state_dict();
    for (DType t : {DType::BF16, DType::F16}) {
      block.to(t);  // as nn::to_precision will: its LayerNorms stay f32
      const Outputs out = [&] {
        EnableGrad grad;
        return run();
      }();
      block.to(DType::F32);
      block.load_state_dict(f32_state);  // the f32 weights back, bit for bit
      const bool bf16 = t == DType::BF16;
      (bf16 ? layer.error_bf16 : layer.error_f16) = relative_error(out.logits, reference.logits);
      (bf16 ? layer.grad_error_bf16 : layer.grad_error_f16) =
          relative_error(out.grads, reference.grads);
    }
    layer.dtype =
        amp::choose_layer_dtype(std::max(layer.error_bf16, layer.grad_error_bf16),
                                std::max(layer.error_f16, layer.grad_error_f16), o.budget);
    plan.layers.push_back(layer);
  }
  // Medians timed apart can add up to more than the whole forward on a loaded machine: the
  // shares are of the larger of the two, so they never pass 100%.
  double blocks_ms = 0;
  for (const amp::PlanLayer& l : plan.layers) blocks_ms += l.time_share;
  for (amp::PlanLayer& l : plan.layers) l.time_share /= std::max(total_ms, blocks_ms);
  model.train(was_training);
  return plan;
}

}  // namespace mixprec::models
