#pragma once
// Helpers shared by the models tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/nn/module.h"

namespace mixprec::models::test {

// [b, t] i64 tokens uniform in [0, vocab).
inline Tensor random_tokens(int64_t b, int64_t t, int64_t vocab, Generator& gen) {
  std::vector<int64_t> v(static_cast<std::size_t>(b * t));
  for (auto& x : v) x = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(vocab));
  return Tensor::from_vector(v, Shape{b, t});
}

// max |a - b| over all elements (any float dtypes, same shape).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = a.detach().to(DType::F64).contiguous(),
               y = b.detach().to(DType::F64).contiguous();
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i)
    m = std::max(m, std::fabs(x.data<double>()[i] - y.data<double>()[i]));
  return m;
}

inline double max_abs(const Tensor& a) {
  const Tensor x = a.detach().to(DType::F64).contiguous();
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(x.data<double>()[i]));
  return m;
}

// The parameter called `name` (a handle sharing its storage); throws if there is none.
inline Tensor parameter(const nn::Module& module, const std::string& name) {
  for (const auto& [n, p] : module.named_parameters())
    if (n == name) return p;
  throw std::out_of_range("no parameter " + name);
}

}  // namespace mixprec::models::test
