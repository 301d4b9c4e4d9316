#include "mixprec/nn/checkpoint.h"

#include "mixprec/autograd/engine.h"
#include "mixprec/autograd/node.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "packed_weight_cache.h"

namespace mixprec::nn {
namespace {

struct CheckpointBackward final : autograd::Node {
  CheckpointFn fn;
  std::vector<Tensor> inputs;  // detached; requires_grad as the originals
  Generator* gen;
  GeneratorState rng_at_forward;
  bool autocast_at_forward;  // the recomputation runs under the forward's autocast state, so
  DType autocast_dtype;      // it makes the same casts and the same dtypes

  std::string_view name() const override { return "CheckpointBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) {
      Tensor leaf = t.defined() ? t.detach() : t;
      if (t.defined() && t.requires_grad()) leaf.requires_grad_();
      leaves.push_back(leaf);
    }
    const GeneratorState rng_now = gen->state();
    gen->set_state(rng_at_forward);
    Tensor out;
    {
      EnableGrad recording;  // the engine runs nodes with grad mode off
      amp::Autocast autocast(autocast_dtype, autocast_at_forward);
      out = fn(leaves);
    }
    gen->set_state(rng_now);
    if (out.requires_grad()) autograd::backward({out}, {grads[0]});
    std::vector<Tensor> result;
    for (const Tensor& leaf : leaves)
      result.push_back(leaf.defined() && leaf.requires_grad() ? leaf.grad() : Tensor());
    return result;
  }
  void release_saved() override { inputs.clear(); }
};

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs, Generator& gen) {
  std::vector<const Tensor*> pointers;
  bool recording = false;
  for (const Tensor& t : inputs) {
    pointers.push_back(&t);
    recording = recording || autograd::needs_grad({&t});
  }
  if (!recording) return fn(inputs);
  const GeneratorState rng_at_forward = gen.state();
  Tensor out;
  {
    NoGrad no_grad;
    detail::ScopedUnpackedWeights unpacked;  // the weights change before the next forward
    out = fn(inputs);
  }
  auto node = std::make_shared<CheckpointBackward>();
  node->fn = fn;
  for (const Tensor& t : inputs) node->inputs.push_back(t.defined() ? t.detach() : t);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) node->inputs[i].requires_grad_();
  node->gen = &gen;
  node->rng_at_forward = rng_at_forward;
  node->autocast_at_forward = amp::autocast_enabled();
  node->autocast_dtype = amp::autocast_enabled() ? amp::autocast_dtype() : DType::F32;
  autograd::record(node, pointers, {&out});
  return out;
}

}  // namespace mixprec::nn
