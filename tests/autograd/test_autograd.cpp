#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>

#include "mixprec/autograd/engine.h"
#include "mixprec/autograd/gradcheck.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
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

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs) {
  const autograd::GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.message << " (max error " << r.max_abs_error << ")";
}

TEST(Autograd, ChainRuleOnASmallGraph) {
  // y = sum((a * b + a) / b): dy/da = (b + 1) / b, dy/db = -a / b^2.
  const Tensor a = Tensor::from_vector<double>({1, 2, 3}),
               b = Tensor::from_vector<double>({2, 4, 8});
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

// A fresh gradient nobody else holds becomes .grad without a copy; one the caller still holds
// (here the seed of backward) is copied, so later accumulation never writes into it.
TEST(Autograd, LeafTakesASoleGradientAndCopiesAShared) {
  const Tensor w = Tensor::from_vector<float>({1, 2, 3, 4});
  w.requires_grad_();
  const Tensor seed = Tensor::full({4}, 1.0, DType::F32);
  w.backward(seed);
  EXPECT_NE(w.grad().data_ptr(), seed.data_ptr());
  w.backward(seed);  // accumulates into .grad, not into the seed
  EXPECT_FLOAT_EQ(seed.value({0}), 1.0f);
  EXPECT_FLOAT_EQ(w.grad().value({0}), 2.0f);

  const Tensor v = Tensor::from_vector<float>({1, 2, 3, 4});
  v.requires_grad_();
  const uint64_t allocs_before = CachingAllocator::global().stats().num_allocs;
  sum(v * v).backward();  // the product's gradient 2 v: one block, taken as .grad
  const uint64_t allocs = CachingAllocator::global().stats().num_allocs - allocs_before;
  EXPECT_FLOAT_EQ(v.grad().value({3}), 8.0f);
  sum(v * v).backward();
  EXPECT_FLOAT_EQ(v.grad().value({3}), 16.0f);
  const uint64_t allocs_again =
      CachingAllocator::global().stats().num_allocs - allocs_before - allocs;
  EXPECT_EQ(allocs_again, allocs) << "the second backward allocates as many blocks (its gradient "
                                     "is summed into .grad, the first one's was taken)";
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

TEST(Autograd, CopiesShareRequiresGradEvenWhenSetLater) {
  // PyTorch semantics: every handle of a tensor is the same tensor. An optimizer that copied
  // the handle before requires_grad_() still sees the gradient.
  const Tensor w = Tensor::from_vector<double>({2, 3});
  const Tensor copy = w;
  w.requires_grad_();
  EXPECT_TRUE(copy.requires_grad());
  sum(copy * copy).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().value({1}), 6.0);
  const Tensor d = w.detach();
  const Tensor d_copy = d;
  d.requires_grad_();
  EXPECT_TRUE(d_copy.requires_grad()) << "a detached tensor is a new leaf shared by its copies";
  EXPECT_FALSE(w.slice(0, 0, 1).detach().requires_grad());
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
  expect_gradcheck(
      [](const std::vector<Tensor>& x) { return x[0].slice(1, 1, 4).transpose(0, 1) * 2.0; },
      {leaf({3, 5}, 6)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) {
        return x[0].view({6, 2}).select(1, 1);
      },
      {leaf({3, 4}, 7)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) {
        return x[0].unsqueeze(0).expand({4, 3, 2}) * 1.5;
      },
      {leaf({3, 2}, 8)});
  expect_gradcheck(
      [](const std::vector<Tensor>& x) {
        return x[0].permute({2, 0, 1}).reshape({-1});
      },
      {leaf({2, 3, 4}, 9)});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].t().contiguous().clone(); },
                   {leaf({3, 4}, 10)});
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

TEST(OpsConv, Bf16GradientsMatchF64InChannelsLast) {
  // The f32-accumulated backward of a bf16 channels_last conv against the f64 gradients.
  Generator gen(90);
  const Tensor x64 = Tensor::randn({2, 16, 8, 8}, gen, DType::F64),
               w64 = Tensor::randn({8, 16, 3, 3}, gen, DType::F64);
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
    EXPECT_NEAR(xb.grad().value({1, i, 3, 4}), x_ref.grad().value({1, i, 3, 4}),
                0.02 * (1 + std::fabs(x_ref.grad().value({1, i, 3, 4}))));
    EXPECT_NEAR(wb.grad().value({i % 8, i, 1, 2}), w_ref.grad().value({i % 8, i, 1, 2}),
                0.02 * (1 + std::fabs(w_ref.grad().value({i % 8, i, 1, 2}))));
  }
}

TEST(OpsAttention, F32BackwardMatchesF64AcrossBlocks) {
  // Sequences longer than one backward block (64 x 128), causal.
  Generator gen(110);
  const Tensor q64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64),
               k64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64),
               v64 = Tensor::randn({1, 2, 150, 16}, gen, DType::F64);
  std::vector<Tensor> grads32, grads64;
  for (DType t : {DType::F32, DType::F64}) {
    const Tensor q = q64.to(t), k = k64.to(t), v = v64.to(t);
    for (const Tensor* x : {&q, &k, &v}) x->requires_grad_();
    sum(scaled_dot_product_attention(q, k, v, {.causal = true}) * q64.to(t).detach()).backward();
    for (const Tensor* x : {&q, &k, &v})
      (t == DType::F32 ? grads32 : grads64).push_back(x->grad().to(DType::F64));
  }
  for (int which = 0; which < 3; ++which)
    for (int64_t i : {0, 63, 64, 149})
      for (int64_t j : {0, 15})
        EXPECT_NEAR(grads32[which].value({0, 1, i, j}), grads64[which].value({0, 1, i, j}), 1e-4)
            << which << " " << i;
}

TEST(OpsResample, ChannelsLastGradientKeepsLayout) {
  const Tensor x = Tensor::randn({1, 4, 4, 4}, DType::BF16).to(MemoryFormat::ChannelsLast);
  x.requires_grad_();
  sum(upsample(x, 2, kernels::UpsampleMode::Nearest)).backward();
  EXPECT_TRUE(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(x.grad().value({0, 2, 1, 3}), 4.0);
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

namespace mixprec {
namespace {

TEST(OpsArith, BroadcastAddKeepsChannelsLast) {
  Generator gen(11);
  const Tensor x = Tensor::randn({2, 3, 4, 5}, gen).to(MemoryFormat::ChannelsLast);
  const Tensor bias = Tensor::randn({2, 3, 1, 1}, gen);
  const Tensor y = add(x, bias);
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(add(bias, x).is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(
      y.value({1, 2, 3, 4}),
      static_cast<double>(static_cast<float>(x.value({1, 2, 3, 4}) + bias.value({1, 2, 0, 0}))));
}

}  // namespace
}  // namespace mixprec
