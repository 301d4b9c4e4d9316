// Per-layer precision plans on a GPT (issue #15 item 2): the planner measures and leaves the
// model as it was, a plan applies through nn::to_precision (the named blocks' parameters end up
// in their dtypes, LayerNorms f32), a plan naming modules the model lacks changes nothing, and a
// planned model trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "gpt_test_util.h"
#include "mixprec/models/gpt_precision_plan.h"
#include "mixprec/models/gpt_train.h"
#include "mixprec/nn/precision.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

const TextDataset& corpus() {
  static const TextDataset data =
      TextDataset::from_file(std::string(MIXPREC_SOURCE_DIR) + "/data/shakespeare.txt");
  return data;
}

std::unique_ptr<GPT> tiny_gpt() {
  Generator gen(5);
  return std::make_unique<GPT>(GPTConfig::tiny(), gen);
}

amp::PrecisionConfig with_plan(amp::PrecisionPlan plan) {
  amp::PrecisionConfig c;
  c.plan = std::make_shared<const amp::PrecisionPlan>(std::move(plan));
  return c;
}

amp::PlanLayer layer(std::string name, DType dtype) {
  amp::PlanLayer l;
  l.name = std::move(name);
  l.dtype = dtype;
  return l;
}

// A planned block computes in its weights' dtype: the stream is cast at its input, so a bf16
// block of an f32 model runs bf16 products (not its weights widened to f32), and the stream is
// cast back for an f32 block after it.
amp::PrecisionConfig with_layers(std::vector<amp::PlanLayer> layers) {
  amp::PrecisionPlan plan;
  plan.layers = std::move(layers);
  return with_plan(std::move(plan));
}

TEST(GPTPrecisionPlan, APlannedBlockComputesInItsDtype) {
  const Tensor tokens = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}).reshape({1, 8});
  auto model = tiny_gpt();
  nn::to_precision(*model, with_layers({layer("h.0", DType::F32), layer("h.1", DType::BF16)}));
  EXPECT_EQ(model->hidden(tokens).dtype(), DType::BF16);   // ln_f writes in its input's dtype
  EXPECT_EQ(model->forward(tokens).dtype(), DType::BF16);  // logits in the stream's dtype
  auto back = tiny_gpt();
  nn::to_precision(*back, with_layers({layer("h.0", DType::BF16), layer("h.1", DType::F32)}));
  EXPECT_EQ(back->hidden(tokens).dtype(), DType::F32);
  // The bf16 block's products ran in bf16: its output is within bf16's rounding of the f32
  // model's, and not equal to it.
  auto f32 = tiny_gpt();
  const Tensor reference = f32->forward(tokens);
  const double error =
      test::max_abs_diff(back->forward(tokens), reference) / test::max_abs(reference);
  EXPECT_GT(error, 1e-4);
  EXPECT_LT(error, 5e-2);
}

TEST(GPTPrecisionPlan, MeasuresEveryBlockAndLeavesTheModelAsItWas) {
  auto model = tiny_gpt();
  const nn::NamedTensors before = model->state_dict();
  std::vector<Tensor> copies;
  for (const auto& [name, t] : before) copies.push_back(t.to(DType::F64));
  const amp::PrecisionPlan plan =
      plan_gpt_precision(*model, corpus(), {.budget = 1e-3, .batches = 2, .batch = 2});
  ASSERT_EQ(plan.layers.size(), 2u);
  double share = 0;
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const amp::PlanLayer& l = plan.layers[i];
    EXPECT_EQ(l.name, "h." + std::to_string(i));
    // bf16 keeps 8 bits, f16 11: rounding the block's weights costs more in bf16.
    EXPECT_GT(l.error_bf16, l.error_f16) << l.name;
    EXPECT_GT(l.error_f16, 0) << l.name;
    EXPECT_LT(l.error_bf16, 0.1) << l.name;
    EXPECT_GT(l.grad_error_bf16, l.grad_error_f16) << l.name;
    EXPECT_GT(l.grad_error_f16, 0) << l.name;
    EXPECT_LT(l.grad_error_bf16, 0.1) << l.name;
    EXPECT_EQ(l.dtype, amp::choose_layer_dtype(std::max(l.error_bf16, l.grad_error_bf16),
                                               std::max(l.error_f16, l.grad_error_f16), 1e-3));
    EXPECT_GT(l.time_share, 0);
    share += l.time_share;
  }
  EXPECT_LE(share, 1.0 + 1e-12);  // of the forward, or of the blocks' sum when that is larger
  const nn::NamedTensors after = model->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].second.dtype(), DType::F32) << after[i].first;
    EXPECT_FALSE(after[i].second.grad().defined()) << after[i].first;
    EXPECT_EQ(test::max_abs_diff(after[i].second, copies[i]), 0.0) << after[i].first;
  }
  // The budget decides: 0 keeps every block f32, a loose one stores every block in bf16.
  for (const amp::PlanLayer& l :
       plan_gpt_precision(*model, corpus(), {.budget = 0, .batches = 1, .batch = 1}).layers)
    EXPECT_EQ(l.dtype, DType::F32);
  for (const amp::PlanLayer& l :
       plan_gpt_precision(*model, corpus(), {.budget = 0.5, .batches = 1, .batch = 1}).layers)
    EXPECT_EQ(l.dtype, DType::BF16);
}

TEST(GPTPrecisionPlan, APlanStoresTheNamedLayersInTheirDtypes) {
  auto model = tiny_gpt();
  amp::PrecisionPlan plan;
  plan.layers = {layer("h.0", DType::BF16), layer("h.1.mlp", DType::F16)};
  nn::to_precision(*model, with_plan(plan));
  int converted = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    DType expected = DType::F32;
    if (name.starts_with("h.0.") && name.find("ln_") == std::string::npos) expected = DType::BF16;
    if (name.starts_with("h.1.mlp.")) expected = DType::F16;
    EXPECT_EQ(p.dtype(), expected) << name;
    converted += expected != DType::F32;
  }
  EXPECT_GE(converted, 6);  // h.0's attention and MLP weights and biases, h.1's MLP
}

TEST(GPTPrecisionPlan, AnUnknownLayerIsAnErrorBeforeAnythingChanges) {
  auto model = tiny_gpt();
  amp::PrecisionPlan plan;
  plan.layers = {layer("h.0", DType::BF16), layer("h.7", DType::BF16),
                 layer("decoder", DType::F16)};
  const std::string e = test_support::error_of([&] { nn::to_precision(*model, with_plan(plan)); });
  EXPECT_NE(e.find("no module 'h.7', 'decoder'"), std::string::npos) << e;
  EXPECT_NE(e.find("h.0.attn"), std::string::npos) << e;  // the modules it has are listed
  for (const Tensor& p : model->parameters()) EXPECT_EQ(p.dtype(), DType::F32);
}

TEST(GPTPrecisionPlan, APlannedModelTrains) {
  auto model = tiny_gpt();
  amp::PrecisionPlan plan;
  plan.layers = {layer("h.0", DType::BF16), layer("h.1", DType::F32)};
  GPTTrainOptions options;
  options.precision = with_plan(plan);
  options.batch = 2;
  options.lr = 3e-3;
  options.warmup = 2;
  options.total_steps = 4;
  GPTTrainer trainer(*model, corpus(), options);
  EXPECT_EQ(model->block(0).mlp().parameters().front().dtype(), DType::BF16);
  const Tensor before = model->block(0).mlp().parameters().front().to(DType::F64);
  double first = 0, last = 0;
  for (int64_t i = 0; i < 4; ++i) {
    last = trainer.step(i);
    if (i == 0) first = last;
    ASSERT_TRUE(std::isfinite(last));
  }
  EXPECT_LT(last, first);
  // The bf16 weights moved (through their f32 masters) and stayed bf16.
  EXPECT_EQ(model->block(0).mlp().parameters().front().dtype(), DType::BF16);
  EXPECT_GT(test::max_abs_diff(model->block(0).mlp().parameters().front(), before), 0.0);
  EXPECT_EQ(trainer.precision().name(), "plan:h.0=bf16,h.1=f32");
}

}  // namespace
}  // namespace mixprec::models
