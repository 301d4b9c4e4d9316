#pragma once
// Helpers the optimizer tests share: raw bytes of tensors (bit-identity checks) and gradients
// set directly on parameters.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/tensor.h"

namespace mixprec::test_support {

// The tensor's elements as raw bytes, row-major: equal bytes means bit-identical values.
inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  if (!t.defined()) return {};
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  return std::vector<unsigned char>(p, p + c.nbytes());
}

inline void set_grad(const Tensor& p, const Tensor& g) { p.autograd_meta()->grad = g; }

inline std::vector<double> values_of(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

}  // namespace mixprec::test_support
