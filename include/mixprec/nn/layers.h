#pragma once
// Layers built on the differentiable ops.
#include <cstdint>
#include <memory>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/nn/module.h"

namespace mixprec::nn {

// A module with one input and one output: what Sequential chains.
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// y = x W^T + b with W [out, in], initialised like PyTorch: U(-1/sqrt(in), 1/sqrt(in)).
class Linear final : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  std::string_view type_name() const override { return "Linear"; }
  Tensor forward(const Tensor& x) override;
  const Tensor& weight() const { return *weight_; }
  Tensor bias() const { return bias_ != nullptr ? *bias_ : Tensor(); }  // undefined without bias

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

class ReLU final : public Layer {
 public:
  std::string_view type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
};

// Runs its layers in order; children are named "0", "1", ...
class Sequential final : public Layer {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers);
  std::string_view type_name() const override { return "Sequential"; }
  void push_back(std::shared_ptr<Layer> layer);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace mixprec::nn
