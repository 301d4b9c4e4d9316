#pragma once
// The interface every optimizer implements, so loss scaling and gradient clipping can work on
// any of them.
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;  // parameters without a gradient are skipped
  void zero_grad();         // drops every parameter's gradient
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
};

}  // namespace mixprec::optim
