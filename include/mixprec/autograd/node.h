#pragma once
// The autograd graph: a Node is the backward function of one op; its next_edges point at the
// nodes that produced its inputs (or at the AccumulateGrad of a leaf). Op implementers use
// the helpers at the end: needs_grad() to decide, record() to attach a node to outputs.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec {
namespace autograd {

struct Node;

// Where a gradient goes: input `input_nr` of `node`.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

struct Node {
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string_view name() const = 0;
  // grads[i] is the gradient of this node's output i (undefined when none reached it). Returns
  // one gradient per next_edges entry; undefined where an input needs none.
  virtual std::vector<Tensor> apply(std::vector<Tensor> grads) = 0;
  // Frees what the forward saved; called after a backward that does not retain the graph.
  virtual void release_saved() {}
  // Leaf accumulators outlive every backward; op nodes are spent by a non-retained one.
  virtual bool is_accumulator() const { return false; }

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;  // creation order: later nodes run first when several are ready
  bool released = false;
};

}  // namespace autograd

// What the autograd layer keeps per tensor (Tensor::autograd_meta()).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;         // null for leaves
  uint32_t output_nr = 0;                          // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the AccumulateGrad, while alive
  // Leaves: called by backward right after this backward's gradient was added into `grad` (once
  // per backward, when every path to the leaf has delivered), so a data-parallel trainer can
  // start reducing a gradient while backward goes on (nn/data_parallel.h). Empty: none.
  std::function<void()> post_accumulate_hook;
};

namespace autograd {

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// The edge a gradient of `t` flows into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);

// Connects `node` to `inputs` (next_edges, in order) and makes it the grad_fn of `outputs`
// (output i gets output_nr i). Outputs become non-leaf tensors that require grad.
void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<const Tensor*> outputs);
// The same for a run-time number of inputs (cat).
void record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            std::initializer_list<const Tensor*> outputs);

// Adds `g` into `sum` (allocating when `sum` is undefined); the result has `sum`'s dtype.
void accumulate(Tensor& sum, const Tensor& g);

}  // namespace autograd
}  // namespace mixprec
