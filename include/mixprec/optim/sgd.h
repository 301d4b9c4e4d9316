#pragma once
// Stochastic gradient descent with momentum, Nesterov and weight decay (PyTorch's update rule),
// computed in f32 (f64 for f64 parameters) in one fused pass per parameter, with f32 master
// weights for f16/bf16 parameters rounded into them once per step (kernels/optim.h).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  Rounding rounding = Rounding::NearestEven;  // into 16-bit parameters
  uint64_t seed = 0;                          // of stochastic rounding
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  std::string_view type_name() const override { return "SGD"; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override;
  SGDOptions options() const;

 protected:
  // The momentum buffer exists only with momentum (PyTorch keeps none without).
  std::vector<std::string> state_names() const override;
  std::map<std::string, double> hyperparameters() const override;
  void set_hyperparameters(const std::map<std::string, double>& values) override;

 private:
  SGDOptions options_;  // rounding and seed live in the base
};

}  // namespace mixprec::optim
