// nn::clip_grad_norm against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "mixprec/nn/clip.h"
#include "optim_test_util.h"
#include "support/error_of.h"

namespace mixprec::nn {
namespace {

using test_support::bytes_of;
using test_support::error_of;
using test_support::set_grad;
using test_support::values_of;

// Two parameters with gradients (3, -4) and (12): L2 norm sqrt(9 + 16 + 144) = 13, L1 19,
// inf-norm 12; a third parameter without a gradient is skipped.
struct Rig {
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({1}, DType::BF16), c = Tensor::zeros({4});
  Rig() {
    for (const Tensor* t : {&a, &b, &c}) t->requires_grad_();
    set_grad(a, Tensor::from_vector<float>({3, -4}));
    set_grad(b, Tensor::full({1}, 12, DType::BF16));
  }
  std::vector<Tensor> params() const { return {a, b, c}; }
};

TEST(ClipGradNorm, HandComputedNormsAndScaling) {
  Rig r;
  EXPECT_EQ(grad_norm(r.params()), 13.0);
  EXPECT_EQ(grad_norm(r.params(), 1.0), 19.0);
  EXPECT_EQ(grad_norm(r.params(), std::numeric_limits<double>::infinity()), 12.0);
  EXPECT_NEAR(grad_norm(r.params(), 3.0), std::cbrt(27.0 + 64 + 1728), 1e-12);

  EXPECT_EQ(clip_grad_norm(r.params(), 6.5), 13.0) << "returns the norm before clipping";
  const double coef = 6.5 / (13.0 + 1e-6);  // ~0.5
  EXPECT_NEAR(r.a.grad().value({0}), 3 * coef, 1e-6);
  EXPECT_NEAR(r.a.grad().value({1}), -4 * coef, 1e-6);
  EXPECT_EQ(r.b.grad().dtype(), DType::BF16) << "clipping keeps the gradient's dtype";
  EXPECT_EQ(r.b.grad().value({0}), 6.0) << "12 * 0.49999996 rounds to 6 in bf16";
  EXPECT_NEAR(grad_norm(r.params()), 6.5, 1e-5);
}

TEST(ClipGradNorm, BelowTheLimitNothingChanges) {
  Rig r;
  const auto before = bytes_of(r.a.grad());
  EXPECT_EQ(clip_grad_norm(r.params(), 13.5), 13.0);
  EXPECT_TRUE(bytes_of(r.a.grad()) == before);
  EXPECT_EQ(clip_grad_norm(r.params(), 5.0, std::numeric_limits<double>::infinity()), 12.0);
  EXPECT_NEAR(r.b.grad().value({0}), 5.0, 0.02) << "inf-norm clipping";
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedOrAnError) {
  Rig r;
  r.a.grad().set({0}, std::numeric_limits<double>::infinity());
  const auto before = bytes_of(r.a.grad());
  EXPECT_TRUE(std::isinf(clip_grad_norm(r.params(), 1.0)));
  EXPECT_TRUE(bytes_of(r.a.grad()) == before) << "left for the scaler to skip";
  EXPECT_EQ(r.b.grad().value({0}), 12.0);
  EXPECT_NE(error_of([&] {
              clip_grad_norm(r.params(), 1.0, 2.0, true);
            }).find("[clip_grad_norm] the total norm of order 2 of the gradients is inf"),
            std::string::npos);
  r.a.grad().set({1}, std::nan(""));
  EXPECT_TRUE(std::isnan(clip_grad_norm(r.params(), 1.0)));
  EXPECT_NE(error_of([&] { clip_grad_norm(r.params(), 1.0, 0.0); }).find("norm_type must be > 0"),
            std::string::npos);
}

TEST(ClipGradNorm, ManySixteenBitGradientsAccumulateExactly) {
  const Tensor w = Tensor::zeros({100000}, DType::BF16);
  w.requires_grad_();
  set_grad(w, Tensor::ones({100000}, DType::BF16));
  EXPECT_EQ(grad_norm({w}), std::sqrt(100000.0));
}

}  // namespace
}  // namespace mixprec::nn
