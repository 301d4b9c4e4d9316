#pragma once
// Nodes the autograd layer itself defines.
#include "mixprec/autograd/node.h"

namespace mixprec::autograd {

// The end of every path to a leaf that requires grad: adds the arriving gradient into .grad()
// (converted to the leaf's dtype; the first one is copied so the leaf owns its gradient).
class AccumulateGrad final : public Node {
 public:
  AccumulateGrad(std::shared_ptr<AutogradMeta> meta, Shape shape, DType dtype)
      : meta_(std::move(meta)), shape_(std::move(shape)), dtype_(dtype) {}
  std::string_view name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  bool is_accumulator() const override { return true; }

 private:
  std::shared_ptr<AutogradMeta> meta_;
  Shape shape_;
  DType dtype_;
};

}  // namespace mixprec::autograd
