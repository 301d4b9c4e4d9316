#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/reduce.h"
#include "mixprec/optim/sgd.h"

namespace mixprec::nn {
namespace {

std::shared_ptr<Sequential> mlp(Generator& gen) {
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{
      std::make_shared<Linear>(4, 32, true, gen), std::make_shared<ReLU>(), std::make_shared<Linear>(32, 1, true, gen)});
}

TEST(Module, NamesParametersInRegistrationOrder) {
  Generator gen(1);
  auto net = mlp(gen);
  const NamedTensors params = net->named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].first, "0.weight");
  EXPECT_EQ(params[1].first, "0.bias");
  EXPECT_EQ(params[3].first, "2.bias");
  EXPECT_EQ(params[0].second.shape(), (Shape{32, 4}));
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  net->eval();
  EXPECT_FALSE(net->named_children()[0].second->training());
}

TEST(Module, StateDictRoundTripsAndNamesProblems) {
  Generator g1(1), g2(2);
  auto a = mlp(g1), b = mlp(g2);
  b->load_state_dict(a->state_dict());
  for (std::size_t i = 0; i < 4; ++i) {
    const Tensor pa = a->parameters()[i].flatten(), pb = b->parameters()[i].flatten();
    for (int64_t j = 0; j < pa.numel(); ++j) ASSERT_EQ(pa.value({j}), pb.value({j})) << i;
  }
  NamedTensors partial = a->state_dict();
  partial.pop_back();
  partial.emplace_back("extra.weight", Tensor::zeros({1}));
  try {
    b->load_state_dict(partial);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys: [2.bias]; unexpected keys: [extra.weight]"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(b->load_state_dict(partial, /*strict=*/false));
  NamedTensors wrong = a->state_dict();
  wrong[0].second = Tensor::zeros({3, 3});
  EXPECT_THROW(b->load_state_dict(wrong), Error);
}

TEST(Module, ToHalvesParameterBytesAndKeepsGradFlag) {
  Generator gen(3);
  auto net = mlp(gen);
  std::size_t before = 0, after = 0;
  for (const Tensor& p : net->parameters()) before += p.nbytes();
  net->to(DType::BF16);
  for (const Tensor& p : net->parameters()) {
    after += p.nbytes();
    EXPECT_EQ(p.dtype(), DType::BF16);
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_EQ(after * 2, before);
  const Tensor y = net->forward(Tensor::ones({2, 4}, DType::BF16));
  EXPECT_EQ(y.dtype(), DType::BF16);
}

TEST(Training, MlpLearnsARegressionInF32WithSgd) {
  // y = sin(x0) + x1 * x2 - x3 on [-1, 1]^4: an MLP gets the MSE well below the target's variance.
  Generator gen(7);
  auto net = mlp(gen);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = Tensor::uniform({256, 4}, -1, 1, gen);
  Tensor y = Tensor::empty({256, 1});
  for (int64_t i = 0; i < 256; ++i)
    y.set({i, 0}, std::sin(x.value({i, 0})) + x.value({i, 1}) * x.value({i, 2}) - x.value({i, 3}));
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    const Tensor diff = net->forward(x) - y;
    const Tensor loss = mean(diff * diff);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 0.3);
  EXPECT_LT(last, 0.02) << "from " << first;
}

}  // namespace
}  // namespace mixprec::nn
