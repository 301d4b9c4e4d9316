// Optimizer state dicts: a round trip continues bit for bit; bad states are clear errors and
// change nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/sgd.h"
#include "optim_test_util.h"
#include "support/error_of.h"

namespace mixprec::optim {
namespace {

using test_support::bytes_of;
using test_support::error_of;
using test_support::set_grad;

// Parameters of three kinds: bf16 (master weight), f32, f16.
std::vector<Tensor> make_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> p{Tensor::randn({4, 3}, gen, DType::BF16), Tensor::randn({5}, gen),
                        Tensor::randn({2, 2}, gen, DType::F16)};
  for (const Tensor& t : p) t.requires_grad_();
  return p;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) {
    out.push_back(p.detach().clone());
    out.back().requires_grad_();
  }
  return out;
}

void step_with(Optimizer& opt, const std::vector<Tensor>& params, uint64_t seed) {
  Generator gen(seed);
  for (const Tensor& p : params) set_grad(p, Tensor::randn(p.shape(), gen));
  opt.step();
}

std::vector<std::vector<unsigned char>> everything(const Optimizer& opt) {
  std::vector<std::vector<unsigned char>> out;
  for (const Tensor& p : opt.params()) out.push_back(bytes_of(p));
  for (const auto& [name, t] : opt.state_dict().tensors) out.push_back(bytes_of(t));
  return out;
}

TEST(OptimizerState, RoundTripContinuesBitForBit) {
  const std::vector<Tensor> pa = make_params(1);
  AdamW a(pa, {.lr = 1e-2, .weight_decay = 0.1, .rounding = Rounding::Stochastic, .seed = 5});
  for (uint64_t s = 0; s < 3; ++s) step_with(a, pa, s);
  const OptimizerState saved = a.state_dict();
  EXPECT_EQ(saved.type, "AdamW");
  // "0.step", "0.master", "0.exp_avg", "0.exp_avg_sq"; "1.step", ...(no master for f32); ...
  std::vector<std::string> names;
  for (const auto& [name, t] : saved.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.step", "0.master", "0.exp_avg", "0.exp_avg_sq",
                                             "1.step", "1.exp_avg", "1.exp_avg_sq", "2.step",
                                             "2.master", "2.exp_avg", "2.exp_avg_sq"}));

  const std::vector<Tensor> pb = clone_params(pa);
  AdamW b(pb, {.lr = 0.5});  // other hyper-parameters, rounding and seed: all replaced
  b.load_state_dict(saved);
  EXPECT_EQ(b.options().lr, 1e-2);
  EXPECT_EQ(b.options().weight_decay, 0.1);
  EXPECT_EQ(b.rounding(), Rounding::Stochastic);
  EXPECT_EQ(b.seed(), 5u);
  EXPECT_EQ(b.step_count(0), 3);
  EXPECT_TRUE(everything(a) == everything(b));
  EXPECT_FALSE(b.master(0).shares_storage(a.master(0))) << "loading copies";
  for (uint64_t s = 3; s < 6; ++s) {
    step_with(a, pa, s);
    step_with(b, pb, s);
  }
  EXPECT_TRUE(everything(a) == everything(b));
}

TEST(OptimizerState, SgdMomentumRoundTrip) {
  const std::vector<Tensor> pa = make_params(2);
  SGD a(pa, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  step_with(a, pa, 0);
  const std::vector<Tensor> pb = clone_params(pa);
  SGD b(pb, {.lr = 0.1});  // no momentum: the loaded state brings it
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.options().momentum, 0.9);
  EXPECT_TRUE(b.options().nesterov);
  step_with(a, pa, 1);
  step_with(b, pb, 1);
  EXPECT_TRUE(everything(a) == everything(b));
}

// Each bad state throws an Error naming the problem, and the optimizer is left as it was.
TEST(OptimizerState, BadStatesAreClearErrorsAndChangeNothing) {
  const std::vector<Tensor> params = make_params(3);
  AdamW opt(params, {.lr = 1e-3});
  step_with(opt, params, 0);
  const OptimizerState good = opt.state_dict();
  const auto before = everything(opt);

  auto expect_error = [&](OptimizerState bad, const std::string& message) {
    const std::string what = error_of([&] { opt.load_state_dict(bad); });
    EXPECT_NE(what.find(message), std::string::npos) << "got: " << what;
    EXPECT_NE(what.find("[AdamW] load_state_dict"), std::string::npos) << what;
    EXPECT_TRUE(everything(opt) == before);
    EXPECT_EQ(opt.lr(), 1e-3);
  };
  auto with = [&](auto edit) {
    OptimizerState s = good;
    for (auto& t : s.tensors) t.second = t.second.clone();
    s.hyperparameters["lr"] = 7.0;  // must not stick when the load fails
    edit(s);
    return s;
  };
  SGD sgd(make_params(4), {.lr = 0.1});
  expect_error(sgd.state_dict(), "the state is for a SGD optimizer, not AdamW");
  expect_error(with([](OptimizerState& s) { s.hyperparameters["num_params"] = 2; }),
               "the state has 2 parameters, this optimizer has 3");
  expect_error(with([](OptimizerState& s) { s.hyperparameters.erase("beta2"); }),
               "hyper-parameter 'beta2' is missing");
  expect_error(with([](OptimizerState& s) { s.hyperparameters["beta1"] = 1.5; }),
               "betas must be in [0, 1)");
  expect_error(with([](OptimizerState& s) { s.tensors.erase(s.tensors.begin() + 2); }),
               "'0.exp_avg' is missing");
  expect_error(with([](OptimizerState& s) {
                 s.tensors[3].second = Tensor::zeros({3, 4});
               }),
               "'0.exp_avg_sq' has shape [3, 4], expected the parameter's [4, 3]");
  expect_error(with([](OptimizerState& s) {
                 s.tensors[1].second = Tensor::zeros({4, 3}, DType::BF16);
               }),
               "'0.master' has dtype bf16, expected f32");
  expect_error(
      with([](OptimizerState& s) { s.tensors.emplace_back("1.master", Tensor::zeros({5})); }),
      "'1.master' given for a parameter of dtype f32");
  expect_error(
      with([](OptimizerState& s) { s.tensors.emplace_back("1.momentum", Tensor::zeros({5})); }),
      "unexpected tensor '1.momentum'");
  expect_error(
      with([](OptimizerState& s) { s.tensors.emplace_back("x.step", Tensor::zeros({1})); }),
      "unexpected tensor name 'x.step'");
  expect_error(
      with([](OptimizerState& s) { s.tensors.emplace_back("7.step", Tensor::zeros({1})); }),
      "names parameter 7 but there are 3");
  expect_error(with([](OptimizerState& s) { s.tensors.erase(s.tensors.begin()); }),
               "parameter 0 has state but no '0.step'");
  expect_error(with([](OptimizerState& s) { s.tensors[0].second = Tensor::scalar(0, DType::I64); }),
               "'0.step' must be >= 1");
  expect_error(with([](OptimizerState& s) { s.tensors[0].second = Tensor::scalar(1); }),
               "'0.step' must be one i64");
  EXPECT_NE(error_of([&] { opt.state(0, "momentum_buffer"); }).find("keeps no state named"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::optim
