#pragma once
// Reverse-mode backpropagation over the recorded graph.
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::autograd {

// Runs the graph backward from `roots`, seeding each with `grads[i]` (or 1 for a scalar root
// when `grads` is empty), accumulating into the .grad() of every leaf that requires grad.
// Nodes run in reverse creation order once all their gradients have arrived. Unless
// `retain_graph`, saved tensors are freed as nodes finish, and a second backward through the
// same nodes throws Error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

}  // namespace mixprec::autograd
