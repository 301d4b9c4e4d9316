// models::GPT against an independent implementation (DESIGN.md section 8, llm.c's test_gpt2):
// tools/make_gpt_golden.py built the same tiny GPT in PyTorch and stored its weights, a batch,
// the logits, the loss and every parameter's gradient (computed in f64, rounded to f32).
// Here the f32 C++ model loads those weights and must reproduce the rest.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gpt_test_util.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/models/gpt.h"

namespace mixprec::models {
namespace {

using test::max_abs;
using test::max_abs_diff;

const std::string kGolden =
    std::string(MIXPREC_SOURCE_DIR) + "/tests/models/data/gpt_tiny_golden.safetensors";

TEST(GPTGolden, MatchesPyTorchLogitsLossAndEveryGradient) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(kGolden);
  const GPTConfig config = GPTConfig::tiny();
  ASSERT_EQ(file.metadata().at("d_model"), std::to_string(config.d_model));
  ASSERT_EQ(file.metadata().at("layers"), std::to_string(config.layers));

  Generator gen(0);
  GPT model(config, gen);
  nn::NamedTensors weights;
  for (const std::string& name : file.names())
    if (name.starts_with("param.")) weights.emplace_back(name.substr(6), file.tensor(name));
  model.load_state_dict(weights, /*strict=*/true);  // every name, both ways

  const Tensor tokens = file.tensor("tokens"), targets = file.tensor("targets");
  const Tensor logits = model(tokens);
  const Tensor expected_logits = file.tensor("logits");
  ASSERT_EQ(logits.shape(), expected_logits.shape());
  // f32 with f32 accumulation over K <= 128 terms, through two blocks: ~1e-6 of the scale.
  EXPECT_LT(max_abs_diff(logits, expected_logits), 2e-5 * (1.0 + max_abs(expected_logits)));

  const Tensor loss = model.loss(tokens, targets);
  EXPECT_NEAR(loss.item<float>(), file.tensor("loss").item<float>(), 2e-5);
  loss.backward();

  std::set<std::string> checked;
  for (const auto& [name, p] : model.named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.contains("grad." + name));
    const Tensor expected = file.tensor("grad." + name);
    ASSERT_TRUE(p.grad().defined());
    ASSERT_EQ(p.grad().shape(), expected.shape());
    const double scale = max_abs(expected);
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(max_abs_diff(p.grad(), expected), 1e-4 * scale + 1e-7)
        << "scale " << scale << " diff " << max_abs_diff(p.grad(), expected);
    checked.insert(name);
  }
  int grads = 0;
  for (const std::string& name : file.names()) grads += name.starts_with("grad.");
  EXPECT_EQ(static_cast<int>(checked.size()), grads);
  EXPECT_EQ(checked.size(), 2u + 2u * 12u + 2u);
}

}  // namespace
}  // namespace mixprec::models
