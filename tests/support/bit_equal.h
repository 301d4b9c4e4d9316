#pragma once
// Whether two tensors hold the same bits: dtype, shape and every byte of their values (views are
// compared by value, whatever their strides).
#include <cstring>

#include "mixprec/core/tensor.h"

namespace mixprec::test_support {

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace mixprec::test_support
