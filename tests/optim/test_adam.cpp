// Adam, AdamW and SGD as users call them: against f64 references of PyTorch's formulas, master
// weights of 16-bit parameters, stochastic rounding over long runs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/optim.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/sgd.h"
#include "optim_test_util.h"
#include "support/error_of.h"

namespace mixprec::optim {
namespace {

using test_support::bytes_of;
using test_support::error_of;
using test_support::set_grad;
using test_support::values_of;

// PyTorch's Adam/AdamW (torch.optim.Adam / AdamW, single-tensor form) in f64.
struct ReferenceAdam {
  std::vector<double> p, m, v;
  int64_t t = 0;

  void step(const std::vector<double>& g, const AdamWOptions& o, bool decoupled) {
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = g[i];
      if (decoupled)
        p[i] *= 1 - o.lr * o.weight_decay;
      else
        gi += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
  }
};

// |got - want| <= rel * max(1, |want|), element by element.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::max(1.0, std::fabs(want[i])))
        << what << "[" << i << "] = " << got[i] << ", reference " << want[i];
}

// Five steps with fresh gradients each, for f32 and f64 parameters, Adam and AdamW.
//
// Tolerance for f32: each step rounds p at most 3 times at magnitude ~|p| (decay, the update,
// the subtraction) and the update itself carries ~8 roundings relative to its own size (<=
// lr / (1 - beta1) ~ 10 lr); m and v carry ~3 roundings each. Summed over 5 steps that is
// below 5 * (3 + 8) * 2^-24 ~ 3.3e-6 relative to max(1, |value|); we allow 8e-6. For f64 the
// same count at 2^-53 is ~6e-15; we allow 1e-13.
TEST(Adam, MatchesPyTorchFormulasInF64) {
  for (DType dtype : {DType::F32, DType::F64}) {
    for (bool decoupled : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (decoupled ? " AdamW" : " Adam"));
      const AdamWOptions o{
          .lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.3};
      Generator gen(7);
      const int64_t n = 37;
      const Tensor w = Tensor::uniform({n}, -2, 2, gen, dtype);
      w.requires_grad_();
      ReferenceAdam ref{values_of(w), std::vector<double>(n), std::vector<double>(n)};
      std::unique_ptr<Optimizer> opt;
      if (decoupled)
        opt = std::make_unique<AdamW>(std::vector<Tensor>{w}, o);
      else
        opt = std::make_unique<Adam>(std::vector<Tensor>{w},
                                     AdamOptions{.lr = o.lr,
                                                 .beta1 = o.beta1,
                                                 .beta2 = o.beta2,
                                                 .eps = o.eps,
                                                 .weight_decay = o.weight_decay});
      for (int s = 0; s < 5; ++s) {
        const Tensor g = Tensor::randn({n}, gen, dtype);
        set_grad(w, g);
        opt->step();
        ref.step(values_of(g), o, decoupled);
      }
      const double rel = dtype == DType::F64 ? 1e-13 : 8e-6;
      EXPECT_EQ(opt->step_count(0), 5);
      expect_close(values_of(w), ref.p, rel, "param");
      expect_close(values_of(opt->state(0, "exp_avg")), ref.m, rel, "exp_avg");
      expect_close(values_of(opt->state(0, "exp_avg_sq")), ref.v, rel, "exp_avg_sq");
      EXPECT_EQ(opt->state(0, "exp_avg").dtype(), dtype == DType::F64 ? DType::F64 : DType::F32);
    }
  }
}

TEST(Adam, DefaultsAndDesignatedInitialisers) {
  const Tensor w = Tensor::zeros({2});
  AdamW opt({w}, {.lr = 3e-4, .weight_decay = 0.1});  // as the GPT training code calls it
  EXPECT_EQ(opt.options().lr, 3e-4);
  EXPECT_EQ(opt.options().beta2, 0.999);
  EXPECT_EQ(opt.options().weight_decay, 0.1);
  EXPECT_EQ(Adam({w}).options().weight_decay, 0.0);
  EXPECT_EQ(AdamW({w}).options().weight_decay, 0.01);
  EXPECT_EQ(opt.type_name(), "AdamW");
  opt.set_lr(1e-3);
  EXPECT_EQ(opt.lr(), 1e-3);
  EXPECT_NE(error_of([&] { opt.set_lr(-1); }).find("[AdamW] lr must be"), std::string::npos);
  EXPECT_NE(error_of([&] { AdamW({w}, {.beta1 = 1.0}); }).find("[AdamW] betas"), std::string::npos);
}

TEST(Adam, ParametersWithoutGradientAreSkipped) {
  const Tensor a = Tensor::ones({3}), b = Tensor::ones({3});
  a.requires_grad_();
  b.requires_grad_();
  AdamW opt({a, b}, {.lr = 0.1});
  set_grad(a, Tensor::ones({3}));
  opt.step();
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 0);
  EXPECT_FALSE(opt.state(1, "exp_avg").defined());
  EXPECT_EQ(values_of(b), std::vector<double>(3, 1.0));
  EXPECT_LT(a.value({0}), 1.0);
}

// A bf16 parameter's master weight takes exactly the path an f32 parameter with the same
// (bf16-representable) start would take; the parameter is that master rounded to nearest even.
TEST(MasterWeights, MasterFollowsTheF32TrajectoryAndParamIsItsRounding) {
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(half));
    Generator gen(3);
    const Tensor start = Tensor::uniform({50}, -1, 1, gen, half);
    const Tensor p16 = start.clone(), p32 = start.to(DType::F32);
    p16.requires_grad_();
    p32.requires_grad_();
    AdamW a({p16}, {.lr = 1e-2}), b({p32}, {.lr = 1e-2});
    for (int s = 0; s < 20; ++s) {
      const Tensor g = Tensor::randn({50}, gen);
      set_grad(p16, g);
      set_grad(p32, g);
      a.step();
      b.step();
    }
    ASSERT_TRUE(a.master(0).defined());
    EXPECT_EQ(a.master(0).dtype(), DType::F32);
    EXPECT_FALSE(b.master(0).defined()) << "f32 parameters need no master";
    EXPECT_TRUE(bytes_of(a.master(0)) == bytes_of(p32));
    EXPECT_TRUE(bytes_of(p16) == bytes_of(p32.to(half)));
  }
}

// 10,000 AdamW steps of ~1e-5 each on bf16 parameters at 1.0, where bf16's spacing below 1 is
// 2^-8: every single update is far below half an ulp (2^-9 ~ 2e-3). With master weights they
// add up (constant gradient: Adam's normalised step is lr each time, 0.1 in all); updating the
// bf16 parameter directly (the kernel without a master) loses every one of them.
TEST(MasterWeights, TenThousandTinyStepsMoveBf16Parameters) {
  const int64_t n = 64, steps = 10000;
  const double lr = 1e-5;
  const Tensor w = Tensor::ones({n}, DType::BF16);
  w.requires_grad_();
  AdamW opt({w}, {.lr = lr, .weight_decay = 0.0});
  const Tensor direct = Tensor::ones({n}, DType::BF16);  // the variant without master weights
  const Tensor m = Tensor::zeros({n}), v = Tensor::zeros({n});
  const Tensor grad = Tensor::ones({n}, DType::BF16);
  for (int64_t s = 1; s <= steps; ++s) {
    set_grad(w, grad);
    opt.step();
    kernels::adam_step({.lr = lr, .weight_decay = 0.0, .step = s},
                       {.param = direct, .grad = grad, .state0 = m, .state1 = v});
  }
  EXPECT_EQ(values_of(direct), std::vector<double>(n, 1.0)) << "without master weights: stuck";
  const double moved = 1.0 - lr * static_cast<double>(steps);  // 0.9
  // Each f32 addition of ~1e-5 to a master in [0.5, 1) rounds by at most half an f32 ulp
  // (2^-25), so 10,000 of them drift by at most 10,000 * 2^-25 ~ 3e-4 from the exact sum.
  for (double x : values_of(opt.master(0))) EXPECT_NEAR(x, moved, 10000 * 0x1p-25);
  const double want = Tensor::full({1}, moved).to(DType::BF16).value({0});
  for (double x : values_of(w)) EXPECT_NEAR(x, want, 1.0 / 256);  // within one bf16 ulp
  EXPECT_LT(values_of(w)[0], 0.95);
}

// The same run with stochastic rounding: each parameter is one of the two bf16 neighbours of
// its master; their mean over 4096 elements tracks the master (unbiased rounding; 5 sigma of
// a mean of Bernoulli roundings is 5 * 2^-8 * 0.5 / 64 ~ 1.5e-4).
TEST(MasterWeights, StochasticRoundingTracksTheMasterInTheMean) {
  const int64_t n = 4096, steps = 2000;
  const double lr = 1e-5;
  const Tensor w = Tensor::ones({n}, DType::BF16);
  w.requires_grad_();
  AdamW opt({w}, {.lr = lr, .weight_decay = 0.0, .rounding = Rounding::Stochastic, .seed = 42});
  const Tensor grad = Tensor::ones({n});
  for (int64_t s = 1; s <= steps; ++s) {
    set_grad(w, grad);
    opt.step();
  }
  const std::vector<double> master = values_of(opt.master(0)), p = values_of(w);
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(master[i], master[0]);
    // The bf16 neighbours of the master (~0.98, where bf16's spacing is 2^-8).
    const double lo = std::floor(master[i] * 256) / 256;
    ASSERT_TRUE(p[i] == lo || p[i] == lo + 1.0 / 256) << p[i] << " for master " << master[i];
    mean += p[i];
  }
  mean /= static_cast<double>(n);
  EXPECT_NEAR(mean, master[0], 1.5e-4);
  EXPECT_NE(mean, 1.0) << "nearest even would leave every parameter at 1";
}

// SGD on the shared kernel: f32 against PyTorch's momentum/Nesterov/weight-decay rule in f64,
// and bf16 parameters with master weights moving under tiny steps.
TEST(SGD, MatchesPyTorchFormulasAndKeepsMasterWeights) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    Generator gen(9);
    const Tensor w = Tensor::uniform({21}, -1, 1, gen);
    w.requires_grad_();
    const SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov};
    SGD opt({w}, o);
    std::vector<double> p = values_of(w), buf(21);
    for (int s = 0; s < 4; ++s) {
      const Tensor g = Tensor::randn({21}, gen);
      set_grad(w, g);
      opt.step();
      const std::vector<double> gv = values_of(g);
      for (std::size_t i = 0; i < p.size(); ++i) {
        double d = gv[i] + o.weight_decay * p[i];
        buf[i] = s == 0 ? d : o.momentum * buf[i] + d;
        d = nesterov ? d + o.momentum * buf[i] : buf[i];
        p[i] -= o.lr * d;
      }
    }
    expect_close(values_of(w), p, 4e-6, "param");
    expect_close(values_of(opt.state(0, "momentum_buffer")), buf, 4e-6, "momentum_buffer");
  }
  const Tensor h = Tensor::ones({8}, DType::BF16);
  h.requires_grad_();
  SGD tiny({h}, {.lr = 1e-4});
  for (int s = 0; s < 1000; ++s) {
    set_grad(h, Tensor::ones({8}));
    tiny.step();
  }
  EXPECT_NEAR(tiny.master(0).value({0}), 0.9, 1e-4);
  EXPECT_LT(h.value({0}), 0.95) << "bf16 parameter moved through its master";
}

TEST(MasterWeights, ResetAfterChangingParameters) {
  const Tensor w = Tensor::ones({4}, DType::F16);
  w.requires_grad_();
  SGD opt({w}, {.lr = 0.5});
  set_grad(w, Tensor::ones({4}));
  opt.step();
  EXPECT_EQ(opt.master(0).value({0}), 0.5);
  w.fill_(3.0);
  opt.reset_master_weights();
  set_grad(w, Tensor::ones({4}));
  opt.step();
  EXPECT_EQ(w.value({0}), 2.5);
}

}  // namespace
}  // namespace mixprec::optim
