// The weights' moving average (--ema): against an f64 reference of the recurrence, from the
// master weights of 16-bit parameters, and the guard that lends it to a model.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/ema.h"
#include "mixprec/optim/sgd.h"
#include "optim_test_util.h"

namespace mixprec::optim {
namespace {

using test_support::set_grad;
using test_support::values_of;

TEST(WeightAverage, FollowsTheRecurrenceOfTheF32Weights) {
  const Tensor p = Tensor::from_vector<float>({1.0f, -2.0f, 0.5f}).requires_grad_();
  SGD sgd({p}, {.lr = 0.1});
  WeightAverage ema(sgd, 0.9);
  std::vector<double> reference = {1.0, -2.0, 0.5};
  for (int step = 0; step < 20; ++step) {
    set_grad(p, Tensor::from_vector<float>({1.0f, 0.5f * static_cast<float>(step), -1.0f}));
    sgd.step();
    ema.update(sgd);
    const std::vector<double> w = values_of(p);
    for (std::size_t i = 0; i < w.size(); ++i) reference[i] = 0.9 * reference[i] + 0.1 * w[i];
  }
  const std::vector<double> got = values_of(ema.averages()[0]);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], reference[i], 1e-6 * std::abs(reference[i])) << i;
}

// With 16-bit parameters the average follows the f32 master weights: updates smaller than half a
// bf16 step never show in the parameter, yet they are the training.
TEST(WeightAverage, AveragesTheMasterWeightsOf16BitParameters) {
  const Tensor p = Tensor::from_vector<float>({1.0f}).to(DType::BF16).requires_grad_();
  AdamW adam({p}, {.lr = 1e-3});
  WeightAverage ema(adam, 0.5);
  for (int step = 0; step < 8; ++step) {
    set_grad(p, Tensor::from_vector<float>({1.0f}).to(DType::BF16));
    adam.step();
    ema.update(adam);
  }
  EXPECT_EQ(ema.averages()[0].dtype(), DType::F32);
  const double master = values_of(adam.master(0))[0], average = values_of(ema.averages()[0])[0];
  EXPECT_LT(master, 1.0 - 7e-3);          // 8 steps of about lr
  EXPECT_EQ(values_of(p)[0], 0.9921875);  // the bf16 parameter moved in bf16 steps
  EXPECT_GT(average, master);             // the average lags the master...
  EXPECT_LT(average, 1.0 - 5e-3);         // ...but it is not the bf16 parameter's
  EXPECT_NE(average, values_of(p)[0]);
}

TEST(ScopedWeights, LendsValuesAndRestoresTheParametersBitForBit) {
  const Tensor p = Tensor::from_vector<float>({0.1f, 0.2f}).to(DType::BF16);
  const std::vector<double> own = values_of(p);
  {
    const ScopedWeights lent({p}, {Tensor::from_vector<float>({3.0f, 1.0f / 3.0f})});
    EXPECT_EQ(values_of(p)[0], 3.0);
    EXPECT_EQ(values_of(p)[1], 0.333984375);  // 1/3 rounded once into bf16
  }
  EXPECT_EQ(values_of(p), own);
}

TEST(WeightAverage, RejectsADecayOutsideZeroToOne) {
  const Tensor p = Tensor::from_vector<float>({1.0f}).requires_grad_();
  SGD sgd({p}, {.lr = 0.1});
  EXPECT_THROW(WeightAverage(sgd, 1.0), Error);
  EXPECT_THROW(WeightAverage(sgd, -0.1), Error);
}

}  // namespace
}  // namespace mixprec::optim
