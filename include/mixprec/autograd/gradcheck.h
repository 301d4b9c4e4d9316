#pragma once
// Checks an op's backward against central finite differences in f64 (PyTorch's gradcheck):
// for a random projection v of the output, the analytical gradient from backward(v) must match
// d(v . f(x)) / dx_j = (v . f(x + eps e_j) - v . f(x - eps e_j)) / (2 eps) for every element j
// of every input that requires grad.
#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 0;  // for the projection v
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // the first mismatch: input, element, analytical, numerical
};

// `inputs` must be f64; those that require grad are checked. `fn` must be deterministic.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

// The same check for tensors that `fn` reaches by itself, such as a module's own parameters
// (gradcheck's fresh copies of its inputs cannot reach them): each element of `params` is
// perturbed in place and restored. `params` must be contiguous f64 leaves that require grad;
// their .grad() is replaced by the analytical gradient.
GradcheckResult gradcheck_parameters(const std::function<Tensor()>& fn,
                                     const std::vector<Tensor>& params,
                                     const GradcheckOptions& options = {});

}  // namespace mixprec::autograd
