#pragma once
// Stochastic gradient descent with momentum, Nesterov and weight decay (PyTorch's update rule),
// computed in f32 (f64 for f64 parameters) and rounded once into each parameter.
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }

 private:
  std::vector<Tensor> momentum_;  // f32 (f64 for f64 parameters), created on first use
  SGDOptions options_;
};

}  // namespace mixprec::optim
