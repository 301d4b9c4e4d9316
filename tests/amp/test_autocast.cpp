#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "mixprec/core/random.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/checkpoint.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"
#include "mixprec/optim/adam.h"
#include "support/error_of.h"

namespace mixprec::amp {
namespace {

using test_support::error_of;

bool bit_identical(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

Tensor param(const Shape& shape, Generator& gen) {
  Tensor p = Tensor::randn(shape, gen);
  p.requires_grad_();
  return p;
}

TEST(AutocastPolicy, EveryRowHasAUniqueName) {
  std::set<std::string_view> names;
  for (const AutocastRow& row : kAutocastPolicy) {
    EXPECT_FALSE(row.name.empty());
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
  }
}

TEST(Autocast, OffByDefaultAndRestoredByGuards) {
  EXPECT_FALSE(autocast_enabled());
  {
    Autocast on(DType::BF16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(), DType::BF16);
    {
      Autocast f16(DType::F16);
      EXPECT_EQ(autocast_dtype(), DType::F16);
      {
        Autocast off(DType::BF16, false);
        EXPECT_FALSE(autocast_enabled());
      }
      EXPECT_TRUE(autocast_enabled());
    }
    EXPECT_EQ(autocast_dtype(), DType::BF16);
  }
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, RejectsAnF32AutocastDtype) {
  EXPECT_NE(error_of([] { Autocast bad(DType::F32); }).find("bf16 or f16"), std::string::npos);
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, LowerOpsRunInTheAutocastDtypeAndMatchExplicitCasts) {
  Generator gen(1);
  const Tensor x = Tensor::randn({5, 8}, gen), w = Tensor::randn({3, 8}, gen);
  const Tensor b = Tensor::randn({3}, gen);
  const Tensor img = Tensor::randn({1, 4, 6, 6}, gen), k = Tensor::randn({2, 4, 3, 3}, gen);
  const Tensor q = Tensor::randn({1, 2, 5, 32}, gen), qkv = Tensor::randn({1, 5, 96}, gen);
  Tensor y, m, c, a, p;
  {
    Autocast on(DType::BF16);
    y = linear(x, w, b);
    m = matmul(x, w.t());
    c = conv2d(img, k);
    a = scaled_dot_product_attention(q, q, q);
    p = multi_head_attention_packed(qkv, 2);
  }
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_EQ(m.dtype(), DType::BF16);
  EXPECT_EQ(c.dtype(), DType::BF16);
  EXPECT_EQ(a.dtype(), DType::BF16);
  EXPECT_EQ(p.dtype(), DType::BF16);
  const DType h = DType::BF16;
  EXPECT_TRUE(bit_identical(y, linear(x.to(h), w.to(h), b.to(h))));
  EXPECT_TRUE(bit_identical(m, matmul(x.to(h), w.t().to(h))));
  EXPECT_TRUE(bit_identical(c, conv2d(img.to(h), k.to(h))));
  EXPECT_TRUE(bit_identical(p, multi_head_attention_packed(qkv.to(h), 2)));
  {
    Autocast on(DType::F16);
    EXPECT_EQ(linear(x, w).dtype(), DType::F16);
  }
  EXPECT_EQ(linear(x, w).dtype(), DType::F32);  // outside a region nothing is cast
}

TEST(Autocast, SensitiveOpsRunInF32) {
  Generator gen(2);
  const Tensor h = Tensor::randn({4, 6}, gen, DType::BF16);
  const Tensor targets = Tensor::from_vector<int64_t>({0, 5, 2, 1});
  Autocast on(DType::BF16);
  EXPECT_EQ(softmax(h, -1).dtype(), DType::F32);
  EXPECT_EQ(log_softmax(h, -1).dtype(), DType::F32);
  EXPECT_EQ(layer_norm(h, {6}).dtype(), DType::F32);
  EXPECT_EQ(rms_norm(h, {6}).dtype(), DType::F32);
  EXPECT_EQ(group_norm(h.view({4, 6, 1}), 2).dtype(), DType::F32);
  EXPECT_EQ(cross_entropy(h, targets).dtype(), DType::F32);
  EXPECT_EQ(mse_loss(h, h).dtype(), DType::F32);
  EXPECT_EQ(exp(h).dtype(), DType::F32);
  EXPECT_EQ(log(h).dtype(), DType::F32);
  EXPECT_EQ(pow(h, 2.0).dtype(), DType::F32);
  EXPECT_EQ(sum(h).dtype(), DType::F32);
  EXPECT_EQ(mean(h).dtype(), DType::F32);
  const Tensor img = h.view({1, 1, 4, 6});
  EXPECT_EQ(upsample(img, 2, kernels::UpsampleMode::Bilinear).dtype(), DType::F32);
  EXPECT_EQ(upsample(img, 2, kernels::UpsampleMode::Nearest).dtype(), DType::BF16);
  // exp of a bf16 value computed in f32: the same as casting first.
  EXPECT_TRUE(bit_identical(exp(h), exp(h.to(DType::F32))));
}

TEST(Autocast, PromoteAndKeep) {
  Generator gen(3);
  const Tensor h = Tensor::randn({2, 3}, gen, DType::BF16), f = Tensor::randn({2, 3}, gen);
  Autocast on(DType::BF16);
  EXPECT_EQ(add(h, f).dtype(), DType::F32);
  EXPECT_EQ(mul(h, h).dtype(), DType::BF16);
  EXPECT_EQ(cat({h, f}, 0).dtype(), DType::F32);  // an error without autocast
  EXPECT_EQ(relu(h).dtype(), DType::BF16);
  EXPECT_EQ(gelu(h).dtype(), DType::BF16);
  EXPECT_EQ(mul(h, 2.0).dtype(), DType::BF16);
}

TEST(Autocast, LeavesF64AndIntegerTensorsAlone) {
  Generator gen(4);
  const Tensor x = Tensor::randn({3, 4}, gen, DType::F64),
               w = Tensor::randn({2, 4}, gen, DType::F64);
  Autocast on(DType::BF16);
  EXPECT_EQ(linear(x, w).dtype(), DType::F64);
  const Tensor idx = Tensor::from_vector<int64_t>({1, 0});
  EXPECT_EQ(embedding(Tensor::randn({2, 4}, gen), idx).dtype(), DType::F32);
}

TEST(AutocastCache, OneConversionPerWeightPerGuard) {
  Generator gen(5);
  const Tensor w = param({16, 16}, gen);
  const Tensor x = Tensor::randn({4, 16}, gen, DType::BF16);  // already bf16: never cast
  reset_autocast_stats();
  for (int guard = 0; guard < 2; ++guard) {
    Autocast on(DType::BF16);
    Tensor h = x;
    for (int use = 0; use < 3; ++use) h = linear(h, w);
    sum(h.to(DType::F32)).backward();
  }
  const AutocastStats s = autocast_stats();
  EXPECT_EQ(s.casts, 2);           // one per guard
  EXPECT_EQ(s.cache_hits, 4);      // the other two uses in each guard
  EXPECT_EQ(s.cache_entries, 0u);  // the cache dies with the outermost guard
}

TEST(AutocastCache, DoesNotGrowWithViewsOfAWeight) {
  Generator gen(6);
  const Tensor w = param({8, 8}, gen);
  const Tensor x = Tensor::randn({2, 8}, gen, DType::BF16);
  Autocast on(DType::BF16);
  reset_autocast_stats();
  for (int forward = 0; forward < 5; ++forward) sum(matmul(x, w.t()).to(DType::F32)).backward();
  EXPECT_EQ(autocast_stats().cache_entries, 0u);  // a view is not a leaf: cast per use
  EXPECT_EQ(autocast_stats().casts, 5);
  linear(x, w);
  linear(x, w);
  EXPECT_EQ(autocast_stats().cache_entries, 1u);
}

TEST(AutocastCache, ACastMadeUnderNoGradIsRemadeWithGradient) {
  Generator gen(7);
  const Tensor w = param({4, 6}, gen);
  const Tensor x = Tensor::randn({3, 6}, gen);
  Autocast on(DType::BF16);
  {
    NoGrad no_grad;
    const Tensor y = linear(x, w);
    EXPECT_FALSE(y.requires_grad());
  }
  const Tensor y = linear(x, w);
  ASSERT_TRUE(y.requires_grad());
  sum(y.to(DType::F32)).backward();
  ASSERT_TRUE(w.grad().defined());
  // d(sum(x w^T))/dw = column sums of x, broadcast to every row, computed from bf16 x.
  const Tensor expected = sum(x.to(DType::BF16).to(DType::F32), {0}, true).expand({4, 6});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_NEAR(w.grad().value({i, j}), expected.value({i, j}), 2e-2);
}

TEST(AutocastCache, AWeightChangedInPlaceIsCastAgain) {
  Generator gen(8);
  const Tensor w = param({2, 3}, gen);
  const Tensor x = Tensor::ones({1, 3});
  Autocast on(DType::BF16);
  reset_autocast_stats();
  const Tensor before = linear(x, w);
  w.fill_(1.0);
  const Tensor after = linear(x, w);
  EXPECT_EQ(after.value({0, 0}), 3.0);
  EXPECT_EQ(after.value({0, 1}), 3.0);
  EXPECT_FALSE(bit_identical(before, after));
  EXPECT_EQ(autocast_stats().casts, 4);  // x twice, w twice: the stale entry was not served
}

TEST(Autocast, BackwardRunsInTheForwardDtypes) {
  Generator gen(9);
  const Tensor w = param({4, 8}, gen);
  const Tensor x = Tensor::randn({3, 8}, gen);
  const Tensor target = Tensor::randn({3, 4}, gen);
  Tensor inside, outside;
  for (bool backward_inside : {true, false}) {
    w.zero_grad();
    Autocast on(DType::BF16);
    const Tensor loss = mse_loss(linear(x, w), target);
    EXPECT_EQ(loss.dtype(), DType::F32);
    if (backward_inside) {
      loss.backward();
      inside = w.grad().clone();
    } else {
      Autocast off(DType::BF16, false);
      loss.backward();
      outside = w.grad().clone();
    }
  }
  EXPECT_EQ(inside.dtype(), DType::F32);  // the parameter's own dtype
  EXPECT_TRUE(bit_identical(inside, outside));
}

TEST(Autocast, CheckpointRecomputesWithTheForwardsCasts) {
  Generator gen(10);
  const Tensor w1 = param({16, 8}, gen), w2 = param({8, 16}, gen);
  const Tensor x = Tensor::randn({4, 8}, gen);
  x.requires_grad_();
  const nn::CheckpointFn block = [&](const std::vector<Tensor>& in) {
    return linear(gelu(linear(in[0], w1)), w2);
  };
  auto run = [&](bool checkpointed, Tensor& out, std::vector<Tensor>& grads) {
    for (const Tensor* t : {&w1, &w2, &x}) t->zero_grad();
    {
      Autocast on(DType::BF16);
      out = checkpointed ? nn::checkpoint(block, {x}) : block({x});
    }
    sum(out.to(DType::F32)).backward();  // outside the region: recomputation restores it
    grads = {w1.grad(), w2.grad(), x.grad()};
  };
  Tensor plain_out, ckpt_out;
  std::vector<Tensor> plain_grads, ckpt_grads;
  run(false, plain_out, plain_grads);
  run(true, ckpt_out, ckpt_grads);
  EXPECT_EQ(ckpt_out.dtype(), DType::BF16);
  EXPECT_TRUE(bit_identical(plain_out, ckpt_out));
  for (std::size_t i = 0; i < plain_grads.size(); ++i)
    EXPECT_TRUE(bit_identical(plain_grads[i], ckpt_grads[i])) << "gradient " << i;
}

}  // namespace
}  // namespace mixprec::amp


namespace mixprec::amp {
namespace {

TEST(AutocastCache, AnOptimizerStepInsideTheRegionInvalidatesTheCast) {
  Generator gen(11);
  const Tensor w = param({4, 4}, gen);
  const Tensor x = Tensor::randn({2, 4}, gen);
  optim::AdamW opt({w}, {.lr = 0.1});
  Autocast on(DType::BF16);
  const Tensor before = linear(x, w);
  sum(before.to(DType::F32)).backward();
  opt.step();
  const Tensor after = linear(x, w);
  EXPECT_FALSE(bit_identical(before, after));
  EXPECT_TRUE(bit_identical(after, linear(x.to(DType::BF16), w.to(DType::BF16))));
}

}  // namespace
}  // namespace mixprec::amp
