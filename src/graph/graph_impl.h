#pragma once
// The graph's data, shared by capture (graph.cpp), the memory plan (plan.cpp) and the dumps
// (dump.cpp).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/capture.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/tensor.h"
#include "mixprec/graph/graph.h"

namespace mixprec::graph {

enum class BufferKind { Input, Constant, Intermediate };

// One storage the recorded kernels touch.
struct Buffer {
  BufferKind kind = BufferKind::Intermediate;
  // A tensor on the buffer. During the capture: the first tensor seen on the recorded storage,
  // for an input, a constant or an intermediate that may fold into a constant (its recorded
  // values); undefined for every other intermediate, whose memory goes back as eager's would.
  // After binding: a constant's own tensor, or a 1-D tensor spanning the buffer's place in the
  // arena.
  Tensor handle;
  std::size_t bytes = 0;
  DType dtype = DType::F32;
  int input = -1;    // Input: which argument
  bool output = false;
  int first = -1;    // first and last kernel touching it (after dead code is dropped)
  int last = -1;
  std::size_t offset = 0;  // Input, Intermediate: where it lives in the arena
  int shares = -1;  // an intermediate computed in place of this earlier buffer (plan.cpp)
};

// A tensor a kernel reads or writes: a view of a buffer.
struct View {
  int buffer = -1;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // elements from the buffer's start
  DType dtype = DType::F32;
};

struct Node {
  std::string op;
  std::vector<int> inputs, outputs;  // views; -1: an absent optional tensor
  capture::Kernel kernel;
  capture::Aliasing aliasing = capture::Aliasing::None;
  capture::Fusions fusions;
  // Bound at the end of the capture: the views as tensors (inputs, then outputs) and the
  // pointers the kernel gets (nullptr for an absent one).
  std::vector<Tensor> tensors;
  std::vector<const Tensor*> input_ptrs, output_ptrs;
};

// Consecutive elementwise kernels [first, end) run chunk by chunk (fuse.cpp): per chunk, per
// kernel, the tensors it gets (1-D slices of its views; a scalar operand whole).
struct Chain {
  int first = 0, end = 0;
  int64_t elements = 0;  // of every sliced view
  struct Call {
    std::vector<Tensor> tensors;
    std::vector<const Tensor*> input_ptrs, output_ptrs;
  };
  std::vector<std::vector<Call>> chunks;  // [chunk][kernel - first], made by bind()
};

struct Graph::Impl {
  std::vector<Buffer> buffers;
  std::vector<View> views;
  std::vector<Node> nodes;
  std::vector<int> output_views;   // -1: an undefined output
  std::vector<int> input_buffers;  // per argument; -1: undefined
  DispatchConfig config;
  std::size_t eliminated = 0;
  std::size_t folded = 0;
  std::size_t fused_upsamples = 0, elided_copies = 0;
  std::size_t fused_epilogues = 0;  // elementwise kernels folded into their producer
  MemoryPlan memory;
  std::vector<Chain> chains;  // in node order, disjoint

  std::shared_ptr<Allocation> arena;
  std::vector<Tensor> staged;   // the input buffers as the arguments' tensors
  std::vector<Tensor> outputs;  // the output views as tensors

  // Turns the results of kernels that read only constants into constants (fold_constants).
  void fold_constants();
  // Drops dead kernels (when asked) and sets every buffer's lifetime.
  void prune(bool eliminate_dead_code);
  // Every buffer's first and last kernel in the current order.
  void set_lifetimes();
  // A nearest upsample read only by a convolution becomes part of it; a convolution's output
  // copied into a concatenation is written into it (rewrite.cpp). Then sets the lifetimes.
  void fuse_into_convolutions();
  // A SiLU after a GroupNorm, an add after a convolution, a cast of its output, folded into it
  // (rewrite.cpp). Then sets the lifetimes.
  void fuse_epilogues();
  std::size_t fuse_epilogue_sweep();  // one sweep of it: how many it folded
  // Reorders the kernels (each still after every kernel whose results or memory it depends on)
  // to keep fewer bytes alive at once, when that lowers the peak (plan.cpp).
  void schedule();
  // Places inputs and intermediates in the arena, an elementwise kernel's output in the place of
  // an input that dies there when reuse_memory (plan.cpp).
  void plan(bool reuse_memory);
  // Finds the elementwise chains (fuse.cpp), after prune and before plan.
  void find_chains();
  // Keeps every buffer a chain touches alive across the whole chain (its chunks interleave the
  // kernels), before the placement; in-place sharing inside a chain stays allowed.
  void extend_chain_lifetimes();
  // Makes the arena and the tensors every kernel runs on.
  void bind();
  // The per-chunk slices of every chain (fuse.cpp), after bind.
  void bind_chains();
  void run_chain(const Chain& chain) const;
  void execute() const;
};

}  // namespace mixprec::graph
