#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>

#include "mixprec/autograd/engine.h"
#include "mixprec/autograd/grad_mode.h"
#include "mixprec/autograd/gradcheck.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"

namespace mixprec {
namespace {

using autograd::gradcheck;

Tensor leaf(const Shape& shape, uint64_t seed, DType dtype = DType::F64) {
  Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, dtype);
  t.requires_grad_();
  return t;
}

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  const autograd::GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.message << " (max error " << r.max_abs_error << ")";
}

TEST(Autograd, ChainRuleOnASmallGraph) {
  // y = sum((a * b + a) / b): dy/da = (b + 1) / b, dy/db = -a / b^2.
  const Tensor a = Tensor::from_vector<double>({1, 2, 3}), b = Tensor::from_vector<double>({2, 4, 8});
  a.requires_grad_();
  b.requires_grad_();
  const Tensor y = sum((a * b + a) / b);
  y.backward();
  for (int64_t i = 0; i < 3; ++i) {
    const double av = a.value({i}), bv = b.value({i});
    EXPECT_DOUBLE_EQ(a.grad().value({i}), (bv + 1) / bv);
    EXPECT_DOUBLE_EQ(b.grad().value({i}), -av / (bv * bv));
  }
  EXPECT_TRUE(a.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
}

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  const Tensor w = Tensor::from_vector<double>({3});
  w.requires_grad_();
  sum(w * w).backward();
  sum(w * w).backward();
  EXPECT_DOUBLE_EQ(w.grad().value({0}), 12.0);  // 2 * (2 w)
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  sum(w).backward();
  EXPECT_DOUBLE_EQ(w.grad().value({0}), 1.0);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  const Tensor w = leaf({4}, 1);
  const Tensor y = sum(exp(w));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the graph was retained
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, NoGradAndInferenceModeRecordNothing) {
  const Tensor w = leaf({3}, 2);
  {
    NoGrad guard;
    EXPECT_FALSE(grad_enabled());
    const Tensor y = w * w;
    EXPECT_FALSE(y.requires_grad());
    {
      EnableGrad on;
      EXPECT_TRUE((w * w).requires_grad());
    }
  }
  {
    InferenceMode guard;
    EXPECT_TRUE(inference_mode_enabled());
    EXPECT_FALSE((w + w).requires_grad());
    EXPECT_FALSE(w.slice(0, 0, 2).requires_grad()) << "views are not tracked either";
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_FALSE(inference_mode_enabled());
}

TEST(Autograd, DetachCutsTheGraph) {
  const Tensor w = leaf({3}, 3);
  const Tensor d = (w * w).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_THROW(d.backward(), Error);
}

TEST(Autograd, ScalarRootOrExplicitGradient) {
  const Tensor w = leaf({2, 3}, 4);
  const Tensor y = w * w;
  EXPECT_THROW(y.backward(), Error) << "non-scalar root needs a gradient";
  y.backward(Tensor::ones({2, 3}, DType::F64));
  EXPECT_NEAR(w.grad().value({1, 2}), 2 * w.value({1, 2}), 1e-12);
}

TEST(Autograd, RequiresGradOnlyOnFloatLeaves) {
  EXPECT_THROW(Tensor::zeros({2}, DType::I32).requires_grad_(), Error);
  const Tensor w = leaf({2}, 5);
  EXPECT_THROW((w * w).requires_grad_(false), Error);
}

TEST(Autograd, ViewsAndCopiesCarryGradients) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].slice(1, 1, 4).transpose(0, 1) * 2.0; },
                   {leaf({3, 5}, 6)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].view({6, 2}).select(1, 1); }, {leaf({3, 4}, 7)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].unsqueeze(0).expand({4, 3, 2}) * 1.5; },
                   {leaf({3, 2}, 8)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].permute({2, 0, 1}).reshape({-1}); },
                   {leaf({2, 3, 4}, 9)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].t().contiguous().clone(); }, {leaf({3, 4}, 10)});
}

TEST(Autograd, DtypeCastsSendGradientsBackInTheSourceDtype) {
  const Tensor w = leaf({8}, 11, DType::F32);
  sum(w.to(DType::BF16) * 3.0).backward();
  ASSERT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_EQ(w.grad().value({5}), 3.0);
  const Tensor h = leaf({8}, 12, DType::BF16);
  sum(h * h).backward();
  EXPECT_EQ(h.grad().dtype(), DType::BF16) << "a gradient has its tensor's dtype";
}

TEST(OpsGradcheck, ArithmeticWithBroadcasting) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0] + x[1]; }, {leaf({3, 4}, 20), leaf({4}, 21)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0] - x[1]; }, {leaf({3, 1}, 22), leaf({1, 4}, 23)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0] * x[1]; }, {leaf({2, 3, 4}, 24), leaf({3, 1}, 25)});
  Tensor denominator = Tensor::uniform({4}, 1.0, 2.0, DType::F64);
  denominator.requires_grad_();
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0] / x[1]; }, {leaf({3, 4}, 26), denominator});
  expect_gradcheck([](const std::vector<Tensor>& x) { return -x[0] * 0.5; }, {leaf({5}, 27)});
}

TEST(OpsGradcheck, UnaryOps) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return exp(x[0]); }, {leaf({7}, 30)});
  Tensor positive = Tensor::uniform({7}, 0.5, 3.0, DType::F64);
  positive.requires_grad_();
  expect_gradcheck([](const std::vector<Tensor>& x) { return log(x[0]); }, {positive});
  expect_gradcheck([](const std::vector<Tensor>& x) { return relu(x[0]); }, {leaf({9}, 31)});
}

TEST(OpsGradcheck, Reductions) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum(x[0]); }, {leaf({3, 4}, 40)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum(x[0], {1}); }, {leaf({3, 4, 2}, 41)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mean(x[0], {0, 2}, true); }, {leaf({3, 4, 2}, 42)});
}

TEST(OpsGradcheck, MatmulAndLinear) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {leaf({5, 7}, 50), leaf({7, 3}, 51)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                   {leaf({2, 4, 6}, 52), leaf({2, 6, 3}, 53)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }, {leaf({2, 4, 6}, 54), leaf({6, 3}, 55)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                   {leaf({2, 3, 5}, 56), leaf({4, 5}, 57), leaf({4}, 58)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1]); }, {leaf({3, 5}, 59), leaf({4, 5}, 60)});
}

TEST(OpsGradcheck, GradcheckCatchesAWrongBackward) {
  // A function whose recorded backward is wrong on purpose: the check must fail.
  const autograd::GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor y;
        {
          NoGrad no_grad;
          y = x[0] * x[0] * x[0];  // value x^3 ...
        }
        return y + x[0] * x[0] - (x[0] * x[0]).detach();  // ... gradient of x^2
      },
      {leaf({4}, 70)});
  EXPECT_FALSE(r.ok);
}

}  // namespace
}  // namespace mixprec

#include "mixprec/ops/conv.h"

namespace mixprec {
namespace {

TEST(OpsGradcheck, Conv2dAllParameters) {
  const std::vector<std::pair<Conv2dParams, std::array<int64_t, 6>>> cases = {
      // params, {N, C, H, W, O, K}
      {{1, 1, 1, 1}, {2, 3, 5, 4, 4, 3}},
      {{2, 0, 1, 1}, {1, 2, 6, 7, 3, 3}},
      {{1, 2, 2, 1}, {1, 2, 7, 7, 2, 3}},
      {{1, 0, 1, 2}, {1, 4, 4, 4, 6, 1}},
      {{1, 1, 1, 3}, {1, 3, 4, 5, 3, 3}},  // depthwise
  };
  uint64_t seed = 80;
  for (const auto& [p, s] : cases) {
    SCOPED_TRACE("stride " + std::to_string(p.stride) + " pad " + std::to_string(p.padding) + " dil " +
                 std::to_string(p.dilation) + " groups " + std::to_string(p.groups));
    expect_gradcheck([p = p](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], x[2], p); },
                     {leaf({s[0], s[1], s[2], s[3]}, seed++), leaf({s[4], s[1] / p.groups, s[5], s[5]}, seed++),
                      leaf({s[4]}, seed++)});
  }
}

TEST(OpsConv, Bf16GradientsMatchF64InChannelsLast) {
  // The f32-accumulated backward of a bf16 channels_last conv against the f64 gradients.
  Generator gen(90);
  const Tensor x64 = Tensor::randn({2, 16, 8, 8}, gen, DType::F64), w64 = Tensor::randn({8, 16, 3, 3}, gen, DType::F64);
  const Tensor xb = x64.to(DType::BF16).to(MemoryFormat::ChannelsLast), wb = w64.to(DType::BF16);
  xb.requires_grad_();
  wb.requires_grad_();
  const Tensor x_ref = xb.detach().to(DType::F64).contiguous(), w_ref = wb.detach().to(DType::F64);
  x_ref.requires_grad_();
  w_ref.requires_grad_();
  sum(conv2d(xb, wb, Tensor(), {1, 1, 1, 1})).backward();
  sum(conv2d(x_ref, w_ref, Tensor(), {1, 1, 1, 1})).backward();
  EXPECT_EQ(xb.grad().dtype(), DType::BF16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(xb.grad().value({1, i, 3, 4}), x_ref.grad().value({1, i, 3, 4}), 0.02 * (1 + std::fabs(x_ref.grad().value({1, i, 3, 4}))));
    EXPECT_NEAR(wb.grad().value({i % 8, i, 1, 2}), w_ref.grad().value({i % 8, i, 1, 2}), 0.02 * (1 + std::fabs(w_ref.grad().value({i % 8, i, 1, 2}))));
  }
}

}  // namespace
}  // namespace mixprec

#include "mixprec/ops/attention.h"

namespace mixprec {
namespace {

TEST(OpsGradcheck, AttentionPlainCausalAndMasked) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
                   {leaf({1, 2, 5, 4}, 100), leaf({1, 2, 7, 4}, 101), leaf({1, 2, 7, 3}, 102)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true}); },
      {leaf({2, 1, 6, 4}, 103), leaf({2, 1, 6, 4}, 104), leaf({2, 1, 6, 4}, 105)});
  Tensor mask = Tensor::randn({1, 1, 5, 7}, DType::F64);
  mask.set({0, 0, 1, 3}, -INFINITY);
  expect_gradcheck(
      [mask](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.mask = mask}); },
      {leaf({1, 2, 5, 4}, 106), leaf({1, 2, 7, 4}, 107), leaf({1, 2, 7, 4}, 108)});
}

TEST(OpsAttention, F32BackwardMatchesF64AcrossBlocks) {
  // Sequences longer than one backward block (64 x 128), causal.
  Generator gen(110);
  const Tensor q64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64), k64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64),
               v64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64);
  std::vector<Tensor> grads32, grads64;
  for (DType t : {DType::F32, DType::F64}) {
    const Tensor q = q64.to(t), k = k64.to(t), v = v64.to(t);
    for (const Tensor* x : {&q, &k, &v}) x->requires_grad_();
    sum(scaled_dot_product_attention(q, k, v, {.causal = true}) * q64.to(t).detach()).backward();
    for (const Tensor* x : {&q, &k, &v}) (t == DType::F32 ? grads32 : grads64).push_back(x->grad().to(DType::F64));
  }
  for (int which = 0; which < 3; ++which)
    for (int64_t i : {0, 63, 64, 149})
      for (int64_t j : {0, 15})
        EXPECT_NEAR(grads32[which].value({0, 1, i, j}), grads64[which].value({0, 1, i, j}), 1e-4) << which << " " << i;
}

}  // namespace
}  // namespace mixprec

#include "mixprec/ops/activation.h"

namespace mixprec {
namespace {

TEST(OpsGradcheck, Activations) {
  for (auto fn : std::vector<Tensor (*)(const Tensor&)>{silu, sigmoid, tanh})
    expect_gradcheck([fn](const std::vector<Tensor>& x) { return fn(x[0]); }, {leaf({11}, 120)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return gelu(x[0]); }, {leaf({11}, 121)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return gelu(x[0], GeluApproximation::Tanh); }, {leaf({11}, 122)});
}

}  // namespace
}  // namespace mixprec

namespace mixprec {
namespace {

TEST(OpsGradcheck, UpsampleAndPooling) {
  using kernels::UpsampleMode;
  expect_gradcheck([](const std::vector<Tensor>& x) { return upsample(x[0], 2, UpsampleMode::Nearest); },
                   {leaf({1, 2, 3, 4}, 130)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return upsample(x[0], 2, UpsampleMode::Bilinear); },
                   {leaf({2, 1, 3, 3}, 131)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return avg_pool2d(x[0], 2); }, {leaf({1, 3, 4, 6}, 132)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return max_pool2d(x[0], 2); }, {leaf({1, 3, 4, 6}, 133)});
}

TEST(OpsResample, ChannelsLastGradientKeepsLayout) {
  const Tensor x = Tensor::randn({1, 4, 4, 4}, DType::BF16).to(MemoryFormat::ChannelsLast);
  x.requires_grad_();
  sum(upsample(x, 2, kernels::UpsampleMode::Nearest)).backward();
  EXPECT_TRUE(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(x.grad().value({0, 2, 1, 3}), 4.0);
}

}  // namespace
}  // namespace mixprec

#include "mixprec/ops/functional.h"

namespace mixprec {
namespace {

TEST(OpsGradcheck, SoftmaxAndLogSoftmax) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return softmax(x[0], 1); }, {leaf({3, 5}, 140)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return log_softmax(x[0], 0); }, {leaf({4, 3}, 141)});
}

TEST(OpsGradcheck, Norms) {
  expect_gradcheck([](const std::vector<Tensor>& x) { return layer_norm(x[0], {6}, x[1], x[2]); },
                   {leaf({3, 6}, 150), leaf({6}, 151), leaf({6}, 152)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return layer_norm(x[0], {2, 3}); }, {leaf({2, 2, 3}, 153)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return rms_norm(x[0], {5}, x[1]); }, {leaf({4, 5}, 154), leaf({5}, 155)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return group_norm(x[0], 2, x[1], x[2]); },
                   {leaf({2, 4, 3, 2}, 156), leaf({4}, 157), leaf({4}, 158)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) { return group_norm(x[0], 2, x[1], x[2], 1e-5, kernels::Activation::SiLU); },
      {leaf({1, 4, 2, 3}, 159), leaf({4}, 160), leaf({4}, 161)});
}

TEST(OpsGradcheck, LossesEmbeddingDropoutCat) {
  const Tensor targets = Tensor::from_vector<int64_t>({2, 0, 1, 2});
  expect_gradcheck([targets](const std::vector<Tensor>& x) { return cross_entropy(x[0], targets); }, {leaf({4, 3}, 170)});
  kernels::CrossEntropyOptions smooth;
  smooth.label_smoothing = 0.1;
  const Tensor with_ignored = Tensor::from_vector<int64_t>({2, -100, 1, 2});
  expect_gradcheck(
      [with_ignored, smooth](const std::vector<Tensor>& x) {
        return cross_entropy(x[0], with_ignored, kernels::Reduction::Sum, smooth);
      },
      {leaf({4, 3}, 171)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mse_loss(x[0], x[1]); }, {leaf({3, 4}, 172), leaf({3, 4}, 173)});
  const Tensor idx = Tensor::from_vector<int64_t>({1, 3, 1, 0}, {2, 2});
  expect_gradcheck([idx](const std::vector<Tensor>& x) { return embedding(x[0], idx); }, {leaf({5, 3}, 174)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) {
        Generator gen(9);  // same mask on every evaluation
        return dropout(x[0], 0.3, true, gen);
      },
      {leaf({20}, 175)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return cat({x[0], x[1]}, 1); }, {leaf({2, 3}, 176), leaf({2, 2}, 177)});
}

TEST(OpsFunctional, CrossEntropyIsF32AndBf16GradientsFollowLogits) {
  const Tensor logits = Tensor::randn({8, 10}, DType::BF16);
  logits.requires_grad_();
  const Tensor loss = cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(loss.dtype(), DType::F32);
  loss.backward();
  EXPECT_EQ(logits.grad().dtype(), DType::BF16);
}

}  // namespace
}  // namespace mixprec
