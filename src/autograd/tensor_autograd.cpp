// Tensor's autograd methods, and the backward of the tensor-level operations core performs:
// views (any of slice, select, permute, view, expand, ...) and copies (to, contiguous, clone).
#include <memory>

#include "mixprec/autograd/engine.h"
#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/core/error.h"
#include "mixprec/kernels/reduce.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec {
namespace autograd {
namespace {

// Backward of every view, from geometry alone: the gradient of the base is zero except where
// the view reads it, so scatter the incoming gradient through the view's strides into a zeroed
// buffer the size of the storage, then read that buffer with the base's strides. Dims the view
// broadcasts (stride 0, expand) receive the sum over their extent.
class ViewBackward final : public Node {
 public:
  ViewBackward(const Tensor& base, const Tensor& view)
      : base_shape_(base.shape()),
        base_strides_(base.strides()),
        base_offset_(base.storage_offset()),
        view_shape_(view.shape()),
        view_strides_(view.strides()),
        view_offset_(view.storage_offset()),
        storage_numel_(static_cast<int64_t>(base.storage()->nbytes() / base.element_size())),
        dtype_(base.dtype()) {}
  std::string_view name() const override { return "ViewBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    if (grads.empty() || !grads[0].defined()) return {Tensor()};
    const Tensor buffer = Tensor::zeros({storage_numel_}, dtype_);
    Tensor target = buffer.as_strided(view_shape_, view_strides_, view_offset_);
    Tensor source = grads[0];
    std::vector<int64_t> broadcast_dims;
    for (std::size_t d = 0; d < view_shape_.size(); ++d)
      if (view_strides_[d] == 0 && view_shape_[d] > 1)
        broadcast_dims.push_back(static_cast<int64_t>(d));
    if (!broadcast_dims.empty()) {
      Tensor summed = Tensor::empty(
          kernels::reduced_shape(source.shape(), broadcast_dims, true, "backward"), source.dtype());
      capture::launch("sum", {&source}, {&summed},
                      [broadcast_dims](const capture::KernelArgs& k) {
                        kernels::sum(k.in(0), broadcast_dims, true, k.out(0));
                      });
      source = summed;
      for (int64_t d : broadcast_dims) target = target.slice(d, 0, 1);
    }
    target.copy_(source);
    return {buffer.as_strided(base_shape_, base_strides_, base_offset_)};
  }

 private:
  Shape base_shape_;
  Strides base_strides_;
  int64_t base_offset_;
  Shape view_shape_;
  Strides view_strides_;
  int64_t view_offset_;
  int64_t storage_numel_;
  DType dtype_;
};

// to / contiguous / clone: the gradient flows back converted to the source's dtype.
class CopyBackward final : public Node {
 public:
  explicit CopyBackward(DType source_dtype) : source_dtype_(source_dtype) {}
  std::string_view name() const override { return "CopyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    if (grads.empty() || !grads[0].defined()) return {Tensor()};
    return {grads[0].to(source_dtype_)};
  }

 private:
  DType source_dtype_;
};

void record_view(const Tensor& base, const Tensor& view) {
  if (!needs_grad({&base})) return;
  for (std::size_t d = 0; d < base.shape().size(); ++d)
    MIXPREC_CHECK(
        base.stride(static_cast<int64_t>(d)) != 0 || base.size(static_cast<int64_t>(d)) <= 1,
        "[autograd] a view of the expanded tensor ", shape_to_string(base.shape()),
        " cannot carry gradients; call contiguous() on it first");
  record(std::make_shared<ViewBackward>(base, view), {&base}, {&view});
}

void record_copy(const Tensor& source, const Tensor& copy) {
  if (!needs_grad({&source})) return;
  record(std::make_shared<CopyBackward>(source.dtype()), {&source}, {&copy});
}

// Installs the hooks when this translation unit is linked, which any program that can make a
// tensor require grad does (requires_grad_ lives here).
std::shared_ptr<AutogradMeta> make_meta() { return std::make_shared<AutogradMeta>(); }

const bool g_hooks_installed = [] {
  detail::autograd_hooks().make_meta = make_meta;
  detail::autograd_hooks().record_view = record_view;
  detail::autograd_hooks().record_copy = record_copy;
  return true;
}();

}  // namespace
}  // namespace autograd

bool Tensor::requires_grad() const {
  return autograd_meta_ != nullptr && autograd_meta_->requires_grad;
}

const Tensor& Tensor::requires_grad_(bool on) const {
  check_defined("requires_grad_");
  MIXPREC_CHECK(!on || is_floating(dtype_),
                "[requires_grad_] only floating tensors can require grad, this is ",
                dtype_name(dtype_));
  MIXPREC_CHECK(
      is_leaf(),
      "[requires_grad_] only leaf tensors can change requires_grad; this one was made by ",
      autograd_meta_->grad_fn->name(), " (use detach() for a new leaf)");
  if (autograd_meta_ == nullptr) {
    if (!on) return *this;
    autograd_meta_ = std::make_shared<AutogradMeta>();
  }
  autograd_meta_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return autograd_meta_ != nullptr ? autograd_meta_->grad : Tensor(); }

void Tensor::zero_grad() const {
  if (autograd_meta_ != nullptr) autograd_meta_->grad = Tensor();
}

bool Tensor::is_leaf() const {
  return autograd_meta_ == nullptr || autograd_meta_->grad_fn == nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  return autograd_meta_ != nullptr ? autograd_meta_->grad_fn : nullptr;
}

void Tensor::backward() const { backward(Tensor()); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this},
                     gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph);
}

Tensor Tensor::detach() const {
  Tensor out = *this;
  out.autograd_meta_ = std::make_shared<AutogradMeta>();  // a new leaf, shared by its copies
  return out;
}

}  // namespace mixprec
