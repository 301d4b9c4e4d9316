#include "mixprec/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/core/profiler.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::autograd {
namespace {

struct Pending {
  std::vector<Tensor> grads;  // one per output of the node
  int dependencies = 0;       // edges into the node not yet delivered
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  MIXPREC_CHECK(grads.empty() || grads.size() == roots.size(), "[backward] got ", grads.size(),
                " gradients for ", roots.size(), " tensors");
  NoGrad no_grad;  // backward itself records nothing
  // Gradients run in the dtypes their forward chose, not in an enclosing autocast region's.
  amp::Autocast autocast_off(DType::F32, false);

  std::vector<std::pair<Edge, Tensor>> seeds;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    MIXPREC_CHECK(root.defined() && root.requires_grad(), "[backward] tensor ", i,
                  " does not require grad and has no grad_fn");
    Tensor g;
    if (grads.empty() || !grads[i].defined()) {
      MIXPREC_CHECK(root.numel() == 1,
                    "[backward] a gradient can be implied only for a scalar; tensor ", i,
                    " has shape ", shape_to_string(root.shape()), ", pass its gradient");
      g = Tensor::ones(root.shape(), root.dtype());
    } else {
      MIXPREC_CHECK(grads[i].shape() == root.shape(), "[backward] gradient ", i, " has shape ",
                    shape_to_string(grads[i].shape()), ", expected ",
                    shape_to_string(root.shape()));
      g = grads[i].dtype() == root.dtype() ? grads[i] : grads[i].to(root.dtype());
    }
    seeds.emplace_back(gradient_edge(root), std::move(g));
  }

  // Count, for every reachable node, the edges that will deliver gradients to it.
  std::unordered_map<Node*, Pending> pending;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const auto& [edge, g] : seeds)
    if (seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->next_edges) {
      if (!e.valid()) continue;
      ++pending[e.node.get()].dependencies;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  auto deliver = [&](const Edge& e, const Tensor& g) {
    Pending& p = pending[e.node.get()];
    if (p.grads.size() < e.node->num_outputs) p.grads.resize(e.node->num_outputs);
    if (g.defined()) accumulate(p.grads[e.input_nr], g);
  };
  using Ready = std::pair<uint64_t, Node*>;  // later nodes first: reverse creation order
  std::priority_queue<Ready> ready;
  std::unordered_set<Node*> queued;
  for (const auto& [edge, g] : seeds) deliver(edge, g);
  for (const auto& [edge, g] : seeds)
    if (pending[edge.node.get()].dependencies == 0 && queued.insert(edge.node.get()).second)
      ready.emplace(edge.node->sequence_nr, edge.node.get());

  const profiler::BackwardPhase backward_phase;
  while (!ready.empty()) {
    Node* node = ready.top().second;
    ready.pop();
    MIXPREC_CHECK(!node->released, "[backward] trying to backward through ", node->name(),
                  " a second time, after its saved tensors were freed; pass retain_graph = true to "
                  "the first backward");
    std::vector<Tensor> outputs;
    {
      const profiler::Timer timer(node->name());
      outputs = node->apply(std::move(pending[node].grads));
    }
    if (!retain_graph && !node->is_accumulator()) {
      node->release_saved();
      node->released = true;
    }
    MIXPREC_ASSERT(node->is_accumulator() || outputs.size() == node->next_edges.size());
    for (std::size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      deliver(e, i < outputs.size() ? outputs[i] : Tensor());
      if (--pending[e.node.get()].dependencies == 0 && queued.insert(e.node.get()).second)
        ready.emplace(e.node->sequence_nr, e.node.get());
    }
  }
}

}  // namespace mixprec::autograd
