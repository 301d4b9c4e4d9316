// Precision parity (issue #5): the same GPT trained for 300 steps on the same batches ends
// within 2% of the f32 loss in bf16 autocast, bf16 parameters with f32 master weights, and f16
// autocast with dynamic loss scaling. A smaller GPT than the benchmark's, so the suite stays
// quick; `mixprec bench train --parity` runs the same check at GPTConfig::small().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "mixprec/models/gpt_train.h"

namespace mixprec::models {
namespace {

const std::string kCorpus = std::string(MIXPREC_SOURCE_DIR) + "/data/shakespeare.txt";

struct Outcome {
  double train_loss;  // mean of the last 20 steps
  double validation_loss;
  int64_t skipped;
};

Outcome train(const std::string& precision, const TextDataset& data) {
  const GPTConfig config{.vocab = 256, .context = 64, .layers = 2, .d_model = 64, .heads = 2};
  Generator gen(7);
  GPT model(config, gen);
  GPTTrainer trainer(model, data,
                     {.precision = amp::PrecisionConfig::parse(precision),
                      .batch = 8,
                      .lr = 3e-3,
                      .warmup = 30,
                      .total_steps = 300,
                      .seed = 3});
  double tail = 0;
  for (int64_t step = 0; step < 300; ++step) {
    const double loss = trainer.step(step);
    EXPECT_TRUE(std::isfinite(loss)) << precision << " step " << step;
    if (step >= 280) tail += loss / 20;
  }
  return {tail, trainer.evaluate(8), trainer.scaler().skipped_steps()};
}

TEST(GPTParity, MixedPrecisionEndsWithin2PercentOfF32) {
  const TextDataset data = TextDataset::from_file(kCorpus);
  const Outcome f32 = train("fp32", data);
  EXPECT_LT(f32.validation_loss, 3.0) << "the f32 run did not learn";  // ln 256 = 5.55
  for (const char* precision : {"bf16", "bf16-params", "fp16"}) {
    const Outcome o = train(precision, data);
    std::printf("%-12s train %.4f  validation %.4f  (f32 %.4f / %.4f)  skipped %lld\n", precision,
                o.train_loss, o.validation_loss, f32.train_loss, f32.validation_loss,
                static_cast<long long>(o.skipped));
    EXPECT_LT(std::abs(o.validation_loss / f32.validation_loss - 1.0), 0.02) << precision;
    EXPECT_LT(std::abs(o.train_loss / f32.train_loss - 1.0), 0.02) << precision;
  }
}

}  // namespace
}  // namespace mixprec::models
