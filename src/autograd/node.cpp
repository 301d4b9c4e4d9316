#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"

#include <atomic>

#include "mixprec/core/error.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/mode/grad_mode.h"
#include "node_internal.h"

namespace mixprec::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// out = a + b as one recorded kernel (a graph capturing a backward replays it).
void add_into(const Tensor& a, const Tensor& b, const Tensor& out) {
  capture::launch("add", {&a, &b}, {&out}, [](const capture::KernelArgs& k) {
    kernels::binary(kernels::BinaryOp::Add, k.in(0), k.in(1), k.out(0));
  });
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grads) {
  if (grads.empty() || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  MIXPREC_CHECK(g.shape() == shape_, "[backward] gradient of shape ", shape_to_string(g.shape()),
                " reached a leaf of shape ", shape_to_string(shape_));
  if (g.dtype() != dtype_) g = g.to(dtype_);
  if (!meta_->grad.defined()) {
    // .grad must be owned, since later sums write into it: a gradient no other tensor holds,
    // filling its whole storage, is taken as it is (as PyTorch steals it); others are copied,
    // keeping their layout.
    const bool sole_owner = g.storage().use_count() == 1 && !g.requires_grad() &&
                            g.storage_offset() == 0 && g.is_contiguous() &&
                            g.storage()->nbytes() == static_cast<std::size_t>(g.numel()) *
                                                         g.element_size();
    meta_->grad = sole_owner ? std::move(g) : g.clone(MemoryFormat::Preserve);
  } else {
    add_into(meta_->grad, g, meta_->grad);
  }
  if (meta_->post_accumulate_hook) meta_->post_accumulate_hook();
  return {};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  const std::shared_ptr<AutogradMeta>& meta = t.autograd_meta();
  if (meta == nullptr) return {};
  if (meta->grad_fn != nullptr) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> acc = meta->grad_accumulator.lock();
  if (acc == nullptr) {
    acc = std::make_shared<AccumulateGrad>(meta, t.shape(), t.dtype());
    meta->grad_accumulator = acc;
  }
  return {acc, 0};
}

void record(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<const Tensor*> outputs) {
  record(node, std::vector<const Tensor*>(inputs), outputs);
}

void record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            std::initializer_list<const Tensor*> outputs) {
  node->next_edges.clear();
  for (const Tensor* t : inputs)
    node->next_edges.push_back(t != nullptr && t->defined() ? gradient_edge(*t) : Edge{});
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  uint32_t output_nr = 0;
  for (const Tensor* out : outputs) {
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = output_nr++;
    out->set_autograd_meta(std::move(meta));
  }
}

void accumulate(Tensor& sum, const Tensor& g) {
  if (!sum.defined()) {
    sum = g;
    return;
  }
  MIXPREC_CHECK(sum.shape() == g.shape(), "[backward] gradients of shapes ",
                shape_to_string(sum.shape()), " and ", shape_to_string(g.shape()),
                " meet at one tensor");
  // Out of place: `sum` may be a gradient another node also received. In sum's layout, so
  // channels_last gradients add as flat vectors instead of lane-by-lane gathers.
  Tensor out = Tensor::empty_like(sum, MemoryFormat::Preserve);
  add_into(sum, g, out);
  sum = out;
}

}  // namespace mixprec::autograd
