#pragma once
// Graph capture and replay of a static-shape function (CUDA graphs' and torch.compile's idea on
// the CPU): run the function once under capture, keep the kernel calls it made, plan every
// intermediate into one arena, then replay the kernels alone.
//
//   graph::Graph g = graph::capture(
//       [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model(in[0])}; }, {x});
//   const Tensor& y = g.run({x2})[0];  // x2: x's shape and dtype; y lives in the graph's arena
//
// What a capture records is what the op front-ends launch (core/capture.h): each kernel with its
// resolved dtypes, layouts and autocast casts, and the tensors it reads and writes as views of
// buffers. A buffer is a graph input (its values are copied in at every run), a constant
// (parameters and packed weights are referenced, not copied: an in-place update of a parameter
// is seen by the next run), or an intermediate (planned into the arena). A replay walks no op
// front-end, allocates nothing (the allocator's statistics show it) and, as it calls the same
// kernels on the same shapes, gives bit-identical results to the eager function.
//
// What cannot be replayed is refused at capture with an error naming it: host code reading
// values computed in the graph (value(), item(): data-dependent control flow or host math),
// random draws (pass the noise as an input), and tensors made during the capture but written by
// code the capture does not see (a kernel called directly instead of through capture::launch).
// Python-style control flow on shapes is fine: shapes are part of the capture.
//
// The function runs three times during a capture: once eagerly (it warms the caches, such as the
// packed weights, and measures the eager activation peak), once recorded, and once replayed to
// check the replay against the recorded run bit for bit.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/capture.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/tensor.h"

namespace mixprec::graph {

// The captured function: inputs -> outputs. An input may be undefined (an optional argument):
// it stays undefined at every run.
using Function = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

struct CaptureOptions {
  // Drop kernels whose results nothing uses (they write no output, input or constant).
  bool eliminate_dead_code = true;
  // Share arena space between intermediates whose lifetimes do not overlap (greedy best fit,
  // largest first). Off: every intermediate gets its own space (for checking the planner).
  bool reuse_memory = true;
  // With reuse_memory: run the kernels in another order where that keeps fewer bytes alive at
  // once (each kernel still after every kernel whose results or memory it depends on, so the
  // results are the same bit for bit): a branch that reads a tensor runs before the kernel
  // that can then overwrite it in place.
  bool reorder = true;
  // Compare the capture's replays (one per pool thread, each running every chunk alone) with
  // the recorded run bit for bit (throws on a difference).
  bool validate = true;
  // Freeze the constants: a kernel that reads only constants (parameters, host values, and what
  // other such kernels made) is not replayed; its results, as the recorded run made them, become
  // constants of the graph. A sampler's timestep embeddings and time MLPs go, for instance. The
  // price: an in-place update of a parameter after the capture is no longer seen (as with
  // packed weights, which are frozen either way). For inference with fixed weights.
  bool fold_constants = false;
  // Run each chain of consecutive elementwise kernels (unary, binary and scalar ops,
  // activations, clamp) over tensors of one shape and layout chunk by chunk: every kernel of the
  // chain on the first few thousand elements, then on the next, so what one kernel writes is
  // still in L1 when the next reads it. The kernels and their arithmetic are unchanged, so the
  // results are bit-identical; the chain's buffers stay alive across the whole chain.
  bool fuse_elementwise = true;
  // Fold into convolutions what only moves their operands: a nearest upsample that one
  // convolution reads is read through by it (the upsampled tensor is never made), and a
  // convolution whose output is only copied into a concatenation writes its channels of the
  // concatenation directly (no copy, no separate output). The arithmetic is unchanged: the
  // results stay bit-identical.
  bool fuse_convolutions = true;
  // Fold into a kernel the elementwise kernel that only finishes its output, where the kernel
  // offers it (capture::Fusions): a SiLU after a GroupNorm becomes the GroupNorm's activation,
  // an add after a convolution its residual epilogue, a cast of a convolution's, linear layer's
  // or GroupNorm's output the dtype it writes; a model written with plain ops then runs
  // the fused kernels a hand-fused one calls. One rounding instead of two, so the results move
  // by up to a rounding of the output dtype (off: bit-identical to eager). The capture's
  // validation then checks each replay against the recorded run within a tolerance.
  bool fuse_epilogues = true;
  // Capture with autograd recording, as the caller's grad mode has it (the default runs the
  // function under InferenceMode): a function that runs a backward, such as with_gradients'
  // training step, is captured whole, the backward's kernels recorded like the forward's.
  bool autograd = false;
};

// Memory of a graph, in bytes.
struct MemoryPlan {
  std::size_t arena_bytes = 0;         // the one block every input copy and intermediate lives in
  std::size_t input_bytes = 0;         // of which the copies of the inputs
  std::size_t intermediate_bytes = 0;  // every intermediate's size added up (no reuse)
  std::size_t eager_peak_bytes = 0;    // the eager run's peak of allocated tensor memory
  // The most bytes alive at once after in-place sharing: what any placement of these lifetimes
  // needs at least (the planner's arena is at least this).
  std::size_t live_peak_bytes = 0;
  std::size_t in_place = 0;            // kernels writing their output in the place of an input
  std::size_t constant_bytes = 0;      // parameters and other constants the graph references
};

class Graph {
 public:
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

  // Copies `inputs` (the captured shapes and dtypes, any layout) into the graph's input buffers
  // and runs the recorded kernels. The outputs are views of the graph's arena, valid until the
  // next run (clone() what must outlive it). Throws a clear error for another count, shape or
  // dtype of inputs, or when the kernel level changed since the capture.
  const std::vector<Tensor>& run(const std::vector<Tensor>& inputs);
  // Runs on what inputs() hold: write the inputs into them, then run(), with no copy at all.
  const std::vector<Tensor>& run();
  const std::vector<Tensor>& inputs() const;

  std::size_t size() const;               // kernels replayed
  std::vector<std::string> ops() const;   // their names, in replay order
  const MemoryPlan& memory() const;
  std::size_t eliminated() const;         // kernels dropped as dead code
  std::size_t folded() const;             // kernels folded into constants
  std::size_t fused_chains() const;       // elementwise chains run chunk by chunk
  std::size_t fused_kernels() const;      // the kernels in those chains
  std::size_t fused_upsamples() const;    // upsamples a convolution reads through
  std::size_t elided_copies() const;      // concatenation copies a convolution writes for
  std::size_t fused_epilogues() const;    // activations, adds and casts folded into their producer

  // One line per kernel: index, op, its tensors (dtype, shape, where: an arena offset, an input
  // or a constant), then the memory summary. With `kernel_ms` (one per kernel, as kernel_times
  // gives), each line ends with its kernel's milliseconds.
  std::string to_string(const std::vector<double>& kernel_ms = {}) const;
  // The same as a Graphviz digraph: kernels as boxes, buffers as ellipses.
  std::string to_dot() const;
  // Where a replay's time goes: runs the graph `rounds` times on what inputs() hold, timing
  // each kernel; per op name, the total milliseconds per replay and the kernel count, slowest
  // first.
  struct OpTime {
    std::string op;
    double ms = 0;
    int count = 0;
  };
  std::vector<OpTime> profile(int rounds = 10) const;
  // The same per kernel, in replay order: milliseconds per replay.
  std::vector<double> kernel_times(int rounds = 10) const;

  struct Impl;

 private:
  friend Graph capture(const Function&, const std::vector<Tensor>&, const CaptureOptions&);
  explicit Graph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Captures `fn` on `example_inputs` (see the top of this file). Runs with autograd off.
Graph capture(const Function& fn, const std::vector<Tensor>& example_inputs,
              const CaptureOptions& options = {});

// A training step's forward and backward as one function to capture (with autograd on).
// `loss_fn` returns the loss to differentiate (a scalar) and, after it, any values to report
// (detached: the unscaled loss, say). The function returns {loss, d loss / d params[0], ...,
// d loss / d params[P-1], reported values...}, a gradient undefined for a parameter the loss
// does not reach. The parameters' .grad() is set aside while it runs and put back after: the
// gradients are outputs (set_gradients makes them .grad()). The parameters are constants of the
// graph: updated in place between replays (an optimizer step), the next replay sees them.
using LossFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
Function with_gradients(LossFunction loss_fn, std::vector<Tensor> params);
// Makes outputs [1, 1 + params.size()) of a with_gradients graph the parameters' .grad() (views
// of the graph's arena, valid until its next run; an undefined one clears that .grad()).
void set_gradients(const std::vector<Tensor>& params, const std::vector<Tensor>& outputs);

// A function captured once per input signature (each input's shape, dtype and layout, the
// kernel dispatch and the autocast state), as MLX's compile and torch.compile do: a call with a new signature captures
// again, one with a known signature replays. The outputs follow Graph::run's rule (valid until
// the next call with the same signature).
class CompiledFunction {
 public:
  explicit CompiledFunction(Function fn, CaptureOptions options = {});
  CompiledFunction(const CompiledFunction&) = delete;  // its graphs own arenas
  CompiledFunction& operator=(const CompiledFunction&) = delete;
  const std::vector<Tensor>& operator()(const std::vector<Tensor>& inputs);
  std::size_t captures() const { return graphs_.size(); }
  // The graph the last call ran (nullptr before the first call).
  const Graph* last() const { return last_; }
  void clear();  // forget every capture (after changing what fn does, say)

 private:
  Function fn_;
  CaptureOptions options_;
  // Per signature: the dispatch, the autocast state, each input's dtype, shape and strides.
  std::map<std::vector<int64_t>, Graph> graphs_;
  std::vector<int64_t> key_;  // the call's signature, reused
  Graph* last_ = nullptr;
};

}  // namespace mixprec::graph
