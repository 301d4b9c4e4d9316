// models::GPT: shapes, causality, the tied head, gradients against finite differences, a tiny
// model overfitting a batch, and half precision against f32.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpt_test_util.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/autograd/gradcheck.h"
#include "mixprec/core/error.h"
#include "mixprec/models/gpt.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/optim/sgd.h"

namespace mixprec::models {
namespace {

using test::max_abs;
using test::max_abs_diff;
using test::random_tokens;

TEST(GPT, ShapesNamesAndParameterCount) {
  Generator gen(1);
  GPT model(GPTConfig::tiny(), gen);
  const Tensor tokens = random_tokens(3, 17, 256, gen);
  const Tensor logits = model(tokens);
  EXPECT_EQ(logits.shape(), (Shape{3, 17, 256}));
  EXPECT_EQ(logits.dtype(), DType::F32);
  const Tensor loss = model.loss(tokens, random_tokens(3, 17, 256, gen));
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), DType::F32);
  // ln(256) = 5.545: a fresh GPT-2 init predicts almost uniformly.
  EXPECT_NEAR(loss.item<float>(), std::log(256.0), 0.1);

  const nn::NamedTensors params = model.named_parameters();
  ASSERT_EQ(params.size(), 2u + 2u * 12u + 2u);
  EXPECT_EQ(params[0].first, "wte.weight");
  EXPECT_EQ(params[1].first, "wpe.weight");
  EXPECT_EQ(params[2].first, "h.0.ln_1.weight");
  EXPECT_EQ(params[4].first, "h.0.attn.c_attn.weight");
  EXPECT_EQ(params[4].second.shape(), (Shape{96, 32}));
  EXPECT_EQ(params[10].first, "h.0.mlp.c_fc.weight");
  EXPECT_EQ(params.back().first, "ln_f.bias");
  EXPECT_EQ(model.num_parameters(), 34688);

  Generator gen2(2);
  GPT small(GPTConfig::small(), gen2);
  EXPECT_EQ(small.num_parameters(), 10'844'160);
  EXPECT_EQ(small.summary(),
            "GPT: 6 layers, d_model 384, 6 heads, context 256, vocab 256: 10,844,160 parameters "
            "(f32)");
}

TEST(GPT, InitialisationIsGpt2sAndSeeded) {
  Generator a(7), b(7);
  GPTConfig config = GPTConfig::tiny();
  config.layers = 8;  // residual std 0.02 / 4 = 0.005
  GPT m1(config, a), m2(config, b);
  auto stddev = [](const Tensor& t) {
    const Tensor x = t.to(DType::F64).contiguous();
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      s += x.data<double>()[i];
      s2 += x.data<double>()[i] * x.data<double>()[i];
    }
    const double n = static_cast<double>(x.numel());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stddev(m1.wte()), 0.02, 0.001);
  EXPECT_NEAR(stddev(m1.block(0).mlp().c_fc().weight()), 0.02, 0.001);
  EXPECT_NEAR(stddev(m1.block(3).mlp().c_proj().weight()), 0.005, 0.0003);
  EXPECT_NEAR(stddev(m1.block(3).attn().c_proj().weight()), 0.005, 0.0005);
  EXPECT_EQ(max_abs(m1.block(0).attn().c_attn().bias()), 0.0);
  const auto p1 = m1.parameters(), p2 = m2.parameters();
  for (std::size_t i = 0; i < p1.size(); ++i) EXPECT_EQ(max_abs_diff(p1[i], p2[i]), 0.0) << i;
  Generator c(8);
  GPT m3(config, c);
  EXPECT_GT(max_abs_diff(m1.wte(), m3.wte()), 0.0);
}

TEST(GPT, RejectsBadInputAndConfigs) {
  Generator gen(3);
  GPT model(GPTConfig::tiny(), gen);
  auto message = [&](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([&] {
              model(Tensor::zeros({2, 4}, DType::F32));
            }).find("[GPT] tokens must"),
            std::string::npos);
  EXPECT_NE(message([&] { model(Tensor::zeros({8}, DType::I64)); }).find("[GPT] expected tokens"),
            std::string::npos);
  EXPECT_NE(message([&] {
              model(Tensor::zeros({1, 33}, DType::I64));
            }).find("context = 32"),
            std::string::npos);
  EXPECT_NE(message([&] {
              model(Tensor::full({1, 4}, 256, DType::I64));
            }).find("[embedding]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              model.loss(Tensor::zeros({2, 4}, DType::I64), Tensor::zeros({2, 3}, DType::I64));
            }).find("[GPT] targets"),
            std::string::npos);
  GPTConfig bad = GPTConfig::tiny();
  bad.heads = 5;
  EXPECT_NE(message([&] { GPT m(bad, gen); }).find("[GPTConfig] 5 heads"), std::string::npos);
  bad = GPTConfig::tiny();
  bad.dropout = 1.0;
  EXPECT_NE(message([&] { GPT m(bad, gen); }).find("[GPTConfig] dropout"), std::string::npos);
  EXPECT_THROW(model.block(2), Error);
}

// Changing tokens after position t must leave every logit at positions <= t unchanged, and
// must change later ones (so the check can fail).
TEST(GPT, IsCausal) {
  Generator gen(4);
  GPT model(GPTConfig::tiny(), gen);
  const int64_t t = 20, cut = 9;
  const Tensor a = random_tokens(2, t, 256, gen);
  const Tensor b = a.clone();
  b.slice(1, cut + 1).copy_(random_tokens(2, t - cut - 1, 256, gen));
  NoGrad no_grad;
  const Tensor la = model(a), lb = model(b);
  EXPECT_EQ(max_abs_diff(la.slice(1, 0, cut + 1), lb.slice(1, 0, cut + 1)), 0.0);
  for (int64_t p = cut + 1; p < t; ++p)
    EXPECT_GT(max_abs_diff(la.select(1, p), lb.select(1, p)), 1e-4) << "position " << p;
}

// The head is the embedding table itself; its gradient is the embedding's plus the head's.
TEST(GPT, TiedHeadSharesStorageAndSumsBothGradients) {
  Generator gen(5);
  GPT model(GPTConfig::tiny(), gen);
  const Tensor tokens = random_tokens(2, 12, 256, gen), targets = random_tokens(2, 12, 256, gen);
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(name == "wte.weight" || !p.shares_storage(model.wte())) << name;

  model.loss(tokens, targets).backward();
  const Tensor tied = model.wte().grad().clone();
  ASSERT_TRUE(tied.defined());

  // The same model with the head on a separate copy of the table: two gradients.
  for (const Tensor& p : model.parameters()) p.zero_grad();
  const Tensor head = model.wte().detach().clone().requires_grad_();
  const Tensor logits = linear(model.hidden(tokens), head);
  cross_entropy(logits.reshape({24, 256}), targets.reshape({24})).backward();
  const Tensor from_embedding = model.wte().grad(), from_head = head.grad();
  ASSERT_TRUE(from_embedding.defined() && from_head.defined());
  EXPECT_GT(max_abs(from_embedding), 1e-6);
  EXPECT_GT(max_abs(from_head), 1e-6);
  const Tensor sum = Tensor::empty_like(tied);
  {
    NoGrad no_grad;
    const Tensor e = from_embedding.contiguous(), h = from_head.contiguous();
    for (int64_t i = 0; i < sum.numel(); ++i)
      sum.data<float>()[i] = e.data<float>()[i] + h.data<float>()[i];
  }
  EXPECT_LE(max_abs_diff(tied, sum), 1e-6 * (1.0 + max_abs(sum)));
  EXPECT_GT(max_abs_diff(tied, from_head), 1e-7);  // the embedding part is not lost

  // Writing through the embedding changes the logits: it really is the head.
  NoGrad no_grad;
  const Tensor before = model(tokens);
  model.wte().select(0, 3).fill_(0.5);
  EXPECT_GT(max_abs_diff(before, model(tokens)), 1e-3);
}

// Every parameter's gradient against central differences, in f64 on a very small GPT.
TEST(GPT, GradientsMatchFiniteDifferencesInF64) {
  Generator gen(6);
  const GPTConfig config{.vocab = 11, .context = 8, .layers = 2, .d_model = 8, .heads = 2};
  GPT model(config, gen);
  model.to(DType::F64, [](const nn::Module&) { return false; });  // norms too
  // Larger weights than GPT-2's 0.02 so that every nonlinearity is exercised.
  for (const auto& [name, p] : model.named_parameters())
    nn::init::normal_(
        p, name.find("ln_") != std::string::npos && name.ends_with("weight") ? 1.0 : 0.0, 0.4, gen);
  const Tensor tokens = random_tokens(2, 7, 11, gen), targets = random_tokens(2, 7, 11, gen);
  const autograd::GradcheckResult r = autograd::gradcheck_parameters(
      [&] { return model.loss(tokens, targets); }, model.parameters(), {.eps = 1e-6, .atol = 1e-7});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_LT(r.max_abs_error, 1e-7);
}

TEST(GPT, TinyModelOverfitsOneBatchWithSgd) {
  Generator gen(7);
  GPT model(GPTConfig::tiny(), gen);
  const Tensor tokens = random_tokens(4, 16, 256, gen), targets = random_tokens(4, 16, 256, gen);
  optim::SGD opt(model.parameters(), {.lr = 0.3, .momentum = 0.9});
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const Tensor loss = model.loss(tokens, targets);
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 5.0f);
  EXPECT_LT(last, 0.01f) << "from " << first;  // 64 random targets memorised
}

// True half precision: bf16 weights (LayerNorms kept f32), bf16 activations, f32 loss.
TEST(GPT, Bf16ForwardMatchesF32) {
  Generator gen(8);
  GPT model(GPTConfig::tiny(), gen);
  const Tensor tokens = random_tokens(2, 32, 256, gen), targets = random_tokens(2, 32, 256, gen);
  NoGrad no_grad;
  const Tensor ref = model(tokens), ref_loss = model.loss(tokens, targets);
  model.to(DType::BF16);
  EXPECT_EQ(model.wte().dtype(), DType::BF16);
  EXPECT_EQ(model.block(0).attn().c_attn().weight().dtype(), DType::BF16);
  for (const auto& [name, p] : model.named_parameters())
    if (name.find("ln_") != std::string::npos) {
      EXPECT_EQ(p.dtype(), DType::F32) << name;
    }
  const Tensor half = model(tokens), half_loss = model.loss(tokens, targets);
  EXPECT_EQ(half.dtype(), DType::BF16);
  EXPECT_EQ(half_loss.dtype(), DType::F32);
  // bf16 keeps 8 significant bits: each rounding is <= 2^-9 relative; a few dozen of them
  // through two blocks stay within a few percent of the logits' scale.
  const double scale = max_abs(ref);
  EXPECT_GT(scale, 0.05);
  EXPECT_LT(max_abs_diff(ref, half), 0.03 * scale);
  EXPECT_NEAR(half_loss.item<float>(), ref_loss.item<float>(), 0.01);
  EXPECT_GT(max_abs_diff(ref, half), 0.0);  // it did run in bf16
}

TEST(GPT, DropoutActsOnlyWhileTraining) {
  Generator gen(9);
  GPTConfig config = GPTConfig::tiny();
  config.dropout = 0.2;
  GPT model(config, gen);
  const Tensor tokens = random_tokens(2, 8, 256, gen);
  NoGrad no_grad;
  const Tensor t1 = model(tokens), t2 = model(tokens);
  EXPECT_GT(max_abs_diff(t1, t2), 1e-4);
  model.eval();
  EXPECT_EQ(max_abs_diff(model(tokens), model(tokens)), 0.0);
}

}  // namespace
}  // namespace mixprec::models
