#include <gtest/gtest.h>

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
