#pragma once
// Activation checkpointing: run a block without keeping its activations, and recompute them in
// backward. Only the inputs (and the random generator's state) are kept, so memory for the
// block's intermediate tensors is paid during its backward only.
#include <functional>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"

namespace mixprec::nn {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Returns fn(inputs). When autograd records (grad mode on, an input requires grad), fn runs
// without recording; backward restores `gen` to its state at the call, runs fn again with
// recording on, backpropagates through that, and puts `gen` back. The recomputation therefore
// draws the same random numbers (dropout masks) as the forward, so the gradients equal those
// of the plain call. fn must be deterministic given its inputs and `gen`.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                  Generator& gen = default_generator());

}  // namespace mixprec::nn
