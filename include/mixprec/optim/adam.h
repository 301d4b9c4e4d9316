#pragma once
// Adam and AdamW with PyTorch's update rule (bias correction, eps outside the square root),
// f32 moments (f64 for f64 parameters) and f32 master weights for f16/bf16 parameters, in one
// fused pass per parameter (kernels/optim.h). The difference is the weight decay:
//   Adam   L2: g += weight_decay * p, before the moments see g
//   AdamW  decoupled: p -= lr * weight_decay * p, outside the moments
//
//   optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
//   optim::AdamW sr(model.parameters(), {.rounding = optim::Rounding::Stochastic, .seed = 7});
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::optim {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  Rounding rounding = Rounding::NearestEven;  // into 16-bit parameters
  uint64_t seed = 0;                          // of stochastic rounding
};

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  Rounding rounding = Rounding::NearestEven;
  uint64_t seed = 0;
};

namespace detail {

// The update both share; `decoupled` picks AdamW's weight decay.
class AdamUpdate : public Optimizer {
 public:
  void step() override;
  double lr() const override { return hp_.lr; }
  void set_lr(double lr) override;

 protected:
  AdamUpdate(std::vector<Tensor> params, const AdamWOptions& options, bool decoupled);
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::map<std::string, double> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

  AdamWOptions hp_;  // rounding and seed live in the base

 private:
  bool decoupled_;
};

}  // namespace detail

class AdamW final : public detail::AdamUpdate {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  std::string_view type_name() const override { return "AdamW"; }
  AdamWOptions options() const;
};

class Adam final : public detail::AdamUpdate {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  std::string_view type_name() const override { return "Adam"; }
  AdamOptions options() const;
};

}  // namespace mixprec::optim
