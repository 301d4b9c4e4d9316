// Sampling: greedy decoding, temperature and top-k, the context window, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "gpt_test_util.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/graph/graph.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/gpt_generate.h"
#include "support/bit_equal.h"

namespace mixprec::models {
namespace {

using test::random_tokens;

TEST(SampleToken, GreedyTemperatureAndTopK) {
  Generator gen(1);
  const std::vector<double> logits{0.0, 3.0, 1.0, 3.0, -2.0};
  EXPECT_EQ(sample_token(logits, 0.0, 0, gen), 1);  // argmax, first of a tie
  EXPECT_EQ(gen.state().offset, 0u);                // greedy draws nothing
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 4000; ++i)
    ++counts[static_cast<std::size_t>(sample_token(logits, 1.0, 2, gen))];
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);  // only the top 2 (the tied 3.0s)
  EXPECT_NEAR(counts[1] / 4000.0, 0.5, 0.04);
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < 4000; ++i)
    ++counts[static_cast<std::size_t>(sample_token(logits, 1.0, 0, gen))];
  // softmax: e^3 / (2 e^3 + e^1 + 1 + e^-2) = 0.4565 for each 3.0
  EXPECT_NEAR(counts[1] / 4000.0, 0.4565, 0.03);
  EXPECT_NEAR(counts[2] / 4000.0, 0.0618, 0.015);
  EXPECT_GT(counts[0], 0);
  // A very low temperature is greedy in effect.
  for (int i = 0; i < 50; ++i) {
    const int64_t tok = sample_token(logits, 1e-3, 0, gen);
    EXPECT_TRUE(tok == 1 || tok == 3);
  }
}

TEST(Generate, GreedyExtendsThePromptWithTheModelsArgmax) {
  Generator gen(2);
  GPT model(GPTConfig::tiny(), gen);
  const std::vector<int64_t> prompt{72, 97, 109, 108, 101, 116};
  const std::vector<int64_t> out = generate(model, prompt, 5, 0.0, 0, gen);
  ASSERT_EQ(out.size(), 11u);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), out.begin()));
  // Each new token is the argmax of the model on everything before it.
  NoGrad no_grad;
  for (std::size_t t = prompt.size(); t < out.size(); ++t) {
    const Tensor x = Tensor::from_vector(std::vector<int64_t>(out.begin(), out.begin() + t),
                                         Shape{1, static_cast<int64_t>(t)});
    const Tensor last = model(x).select(1, -1).select(0, 0).contiguous();
    const float* l = last.data<float>();
    EXPECT_EQ(std::max_element(l, l + 256) - l, out[t]) << "step " << t;
  }
}

TEST(Generate, RunsPastTheContextWindowAndIsSeeded) {
  Generator gen(3);
  GPTConfig config = GPTConfig::tiny();
  config.context = 8;
  config.dropout = 0.3;
  GPT model(config, gen);
  const Tensor prompt = random_tokens(2, 5, 256, gen);
  Generator a(11), b(11), c(12);
  const Tensor x = generate(model, prompt, 20, 1.0, 40, a);
  const Tensor y = generate(model, prompt, 20, 1.0, 40, b);
  const Tensor z = generate(model, prompt, 20, 1.0, 40, c);
  EXPECT_EQ(x.shape(), (Shape{2, 25}));
  EXPECT_TRUE(model.training());  // restored after the eval-mode generation
  bool same = true, other = false;
  std::set<int64_t> seen;
  for (int64_t i = 0; i < x.numel(); ++i) {
    same &= x.data<int64_t>()[i] == y.data<int64_t>()[i];
    other |= x.data<int64_t>()[i] != z.data<int64_t>()[i];
    EXPECT_GE(x.data<int64_t>()[i], 0);
    EXPECT_LT(x.data<int64_t>()[i], 256);
    seen.insert(x.data<int64_t>()[i]);
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(other);
  EXPECT_GT(seen.size(), 10u);                 // an untrained model samples broadly
  EXPECT_EQ(a.state().offset, 2u * 2u * 20u);  // one 64-bit draw per sequence per step
}

// Feeding a sequence one token at a time through the KV cache gives forward()'s logits.
TEST(KVCache, StepwiseLogitsMatchTheFullForward) {
  Generator gen(5);
  GPT model(GPTConfig::tiny(), gen);
  const Tensor tokens = random_tokens(2, 32, 256, gen);
  NoGrad no_grad;
  const Tensor full = model(tokens);  // [2, 32, 256]
  KVCache cache;
  const Tensor prefill = model.forward_cached(tokens.slice(1, 0, 5).contiguous(), cache);
  EXPECT_EQ(cache.length, 5);
  ASSERT_EQ(cache.layers.size(), 2u);
  EXPECT_EQ(cache.layers[1].k.shape(), (Shape{2, 4, 32, 8}));  // room for the whole context
  EXPECT_LT(test::max_abs_diff(prefill, full.slice(1, 0, 5)), 1e-5);
  for (int64_t t = 5; t < 32; ++t) {
    const Tensor step = model.forward_cached(tokens.slice(1, t, t + 1).contiguous(), cache);
    EXPECT_LT(test::max_abs_diff(step, full.slice(1, t, t + 1)), 1e-5) << "position " << t;
  }
  EXPECT_EQ(cache.length, 32);
  // Full: the context is used up. A filled cache takes one token at a time.
  EXPECT_THROW(model.forward_cached(tokens.slice(1, 0, 1).contiguous(), cache), Error);
  cache.clear();
  model.forward_cached(tokens.slice(1, 0, 3).contiguous(), cache);
  EXPECT_THROW(model.forward_cached(tokens.slice(1, 3, 5).contiguous(), cache), Error);
  EXPECT_EQ(cache.length, 3);  // a refused call leaves the cache as it was
  EXPECT_NO_THROW(model.forward_cached(tokens.slice(1, 3, 4).contiguous(), cache));
}

// forward_at (one token at a position held in a tensor) gives forward_cached's logits bit for
// bit, in f32 and in true bf16, and writes the same keys and values.
TEST(KVCache, StepAtATensorPositionMatchesTheCachedStep) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(7);
    GPT model(GPTConfig::tiny(), gen);
    model.to(dtype);
    const Tensor tokens = random_tokens(2, 32, 256, gen);
    InferenceMode inference;
    KVCache cached, at;
    model.forward_cached(tokens.slice(1, 0, 3).contiguous(), cached);
    model.forward_cached(tokens.slice(1, 0, 3).contiguous(), at);
    Tensor position = Tensor::zeros({1}, DType::I64);
    for (int64_t t = 3; t < 32; ++t) {
      const Tensor token = tokens.slice(1, t, t + 1).contiguous();
      const Tensor want = model.forward_cached(token, cached);
      position.data<int64_t>()[0] = t;
      EXPECT_TRUE(test_support::bit_equal(model.forward_at(token, position, at), want))
          << "position " << t;
    }
    for (std::size_t layer = 0; layer < 2; ++layer)
      EXPECT_TRUE(test_support::bit_equal(at.layers[layer].k, cached.layers[layer].k));
  }
}

TEST(KVCache, StepAtATensorPositionRejectsWhatItCannotReplay) {
  Generator gen(8);
  GPT model(GPTConfig::tiny(), gen);
  InferenceMode inference;
  const Tensor token = Tensor::zeros({1, 1}, DType::I64), position = Tensor::zeros({1}, DType::I64);
  KVCache empty;
  EXPECT_THROW(model.forward_at(token, position, empty), Error);  // no prompt yet
  KVCache cache;
  model.forward_cached(Tensor::zeros({1, 2}, DType::I64), cache);
  EXPECT_THROW(model.forward_at(Tensor::zeros({1, 2}, DType::I64), position, cache), Error);
  EXPECT_THROW(model.forward_at(Tensor::zeros({2, 1}, DType::I64), position, cache), Error);
  EXPECT_THROW(model.forward_at(token, Tensor::zeros({2}, DType::I64), cache), Error);
  EXPECT_THROW(model.forward_at(token, Tensor::zeros({1}, DType::I32), cache), Error);
  // A position past the context: refused when the cache is written, nothing written.
  const Tensor k_before = cache.layers[0].k.clone();
  EXPECT_THROW(model.forward_at(token, Tensor::full({1}, 32, DType::I64), cache), Error);
  EXPECT_TRUE(test_support::bit_equal(cache.layers[0].k, k_before));
}

// A graph of the one-token step replays at every later position without allocating, and gives
// the eager step's logits bit for bit.
TEST(KVCache, ReplayedStepIsTheEagerStepWithoutAllocating) {
  Generator gen(9);
  GPT model(GPTConfig::tiny(), gen);
  model.to(DType::BF16);
  const Tensor tokens = random_tokens(1, 32, 256, gen);
  InferenceMode inference;
  KVCache eager, replayed;
  model.forward_cached(tokens.slice(1, 0, 4).contiguous(), eager);
  model.forward_cached(tokens.slice(1, 0, 4).contiguous(), replayed);
  Tensor position = Tensor::full({1}, 4, DType::I64);
  graph::CaptureOptions planning_only;  // as generate() captures: no rounding changed
  planning_only.fuse_epilogues = false;
  graph::Graph step = graph::capture(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{model.forward_at(in[0], in[1], replayed)};
      },
      {tokens.slice(1, 4, 5).contiguous(), position}, planning_only);
  for (int64_t t = 4; t < 32; ++t) {
    const Tensor token = tokens.slice(1, t, t + 1).contiguous();
    position.data<int64_t>()[0] = t;
    const MemoryStats before = CachingAllocator::global().stats();
    const Tensor got = step.run({token, position})[0];
    const MemoryStats after = CachingAllocator::global().stats();
    if (t > 5) {
      EXPECT_EQ(after.num_allocs, before.num_allocs) << "position " << t;
    }
    const Tensor want = model.forward_at(token, position, eager);
    EXPECT_TRUE(test_support::bit_equal(got, want)) << "position " << t;
  }
}

TEST(KVCache, GenerationMatchesTheUncachedReference) {
  Generator gen(6);
  GPTConfig config = GPTConfig::tiny();
  config.context = 12;  // the run crosses the context: every path must crop alike
  GPT model(config, gen);
  for (const int64_t prompt_length : {4, 1}) {  // a one-token prompt fills the cache first too
    const Tensor prompt = random_tokens(2, prompt_length, 256, gen);
    for (const double temperature : {0.0, 1.0}) {
      Generator a(21), b(21), c(21);
      const Tensor replayed = generate(model, prompt, 16, temperature, 0, a, Decoding::Replayed);
      const Tensor cached = generate(model, prompt, 16, temperature, 0, b, Decoding::Cached);
      const Tensor window = generate(model, prompt, 16, temperature, 0, c, Decoding::Window);
      for (int64_t i = 0; i < cached.numel(); ++i) {
        EXPECT_EQ(cached.data<int64_t>()[i], window.data<int64_t>()[i])
            << "temperature " << temperature << " element " << i;
        EXPECT_EQ(replayed.data<int64_t>()[i], window.data<int64_t>()[i])
            << "temperature " << temperature << " element " << i;
      }
    }
  }
}

TEST(Generate, RejectsBadArguments) {
  Generator gen(4);
  GPT model(GPTConfig::tiny(), gen);
  EXPECT_THROW(generate(model, std::vector<int64_t>{}, 3, 1.0, 0, gen), Error);
  EXPECT_THROW(generate(model, std::vector<int64_t>{1}, -1, 1.0, 0, gen), Error);
  EXPECT_THROW(generate(model, std::vector<int64_t>{1}, 3, -1.0, 0, gen), Error);
  EXPECT_THROW(generate(model, std::vector<int64_t>{1}, 3, 1.0, -2, gen), Error);
  EXPECT_THROW(generate(model, std::vector<int64_t>{300}, 3, 1.0, 0, gen), Error);
  EXPECT_THROW(generate(model, Tensor::zeros({4}, DType::I64), 3, 1.0, 0, gen), Error);
  EXPECT_EQ(generate(model, std::vector<int64_t>{1, 2}, 0, 1.0, 0, gen).size(), 2u);
}

}  // namespace
}  // namespace mixprec::models
