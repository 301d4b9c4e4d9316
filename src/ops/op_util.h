#pragma once
// Shared pieces of the op front-ends.
#include <initializer_list>
#include <memory>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/core/error.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/reduce.h"
#include "mixprec/mode/autocast.h"

namespace mixprec::ops_detail {

// The backward of an op: when any of `inputs` needs a gradient, a node N filled by fill(N&)
// becomes the grad_fn of `outputs`, with one edge per input, in order. (Integer inputs, such as
// targets and indices, never need one.)
template <class N, class Fill>
void record_backward(std::initializer_list<const Tensor*> inputs,
                     std::initializer_list<const Tensor*> outputs, Fill&& fill) {
  if (!autograd::needs_grad(inputs)) return;
  auto node = std::make_shared<N>();
  fill(*node);
  autograd::record(node, inputs, outputs);
}

// out = x summed over `dims`, kept as size-1 dims, as one recorded kernel (backward code calls
// the kernel directly; a graph capturing the backward replays it).
inline void sum_into(const Tensor& x, std::vector<int64_t> dims, const Tensor& out) {
  capture::launch("sum", {&x}, {&out}, [dims = std::move(dims)](const capture::KernelArgs& k) {
    kernels::sum(k.in(0), dims, true, k.out(0));
  });
}

// The gradient of a broadcast input: g summed over the dims it was broadcast along, reshaped
// to `shape`, in `dtype`.
inline Tensor sum_to(const Tensor& g, const Shape& shape, DType dtype) {
  Tensor out = g;
  if (g.shape() != shape) {
    const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < g.dim(); ++d)
      if (d < lead || (shape[static_cast<std::size_t>(d - lead)] == 1 && g.size(d) != 1))
        dims.push_back(d);
    if (!dims.empty()) {
      out = Tensor::empty(kernels::reduced_shape(g.shape(), dims, true, "sum_to"), g.dtype());
      sum_into(g, dims, out);
    }
    out = out.reshape(shape);
  }
  return out.dtype() == dtype ? out : out.to(dtype);
}

inline void check_float(const char* op, const Tensor& t) {
  MIXPREC_CHECK(t.defined(), "[", op, "] got an undefined tensor");
  MIXPREC_CHECK(is_floating(t.dtype()), "[", op, "] expected a floating tensor, got ",
                dtype_name(t.dtype()));
}

}  // namespace mixprec::ops_detail
