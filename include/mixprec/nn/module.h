#pragma once
// nn::Module: the owner of named parameters, buffers and child modules, as in PyTorch.
// Parameters live in the module (stable addresses: a layer keeps a reference to its own), and
// everything that walks a model (parameters(), state_dict(), to(), train()) goes through the
// registries, in registration order, with dotted names ("block.0.weight").
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual std::string_view type_name() const = 0;

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Converts floating parameters and buffers to `dtype`, except in modules `keep_f32` selects
  // (by default the normalisation layers, whose parameters stay f32 in half-precision models).
  // Gradients are dropped; requires_grad is kept.
  void to(DType dtype, const std::function<bool(const Module&)>& keep_f32 = is_norm_layer);
  static bool is_norm_layer(const Module& m);
  // Lays 4-D parameters and buffers out as `format` (channels_last for NHWC convolutions).
  void to(MemoryFormat format);

  // Parameters then buffers, by dotted name.
  NamedTensors state_dict() const;
  // Copies values in (converting between floating dtypes exactly / with round to nearest even).
  // With `strict`, missing and unexpected names are an Error that lists them; shape mismatches
  // and an integer or bool tensor for a floating one (or the reverse) always are. Everything is
  // checked before anything is copied: a refused state leaves the module unchanged.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // Calls fn on this module and every descendant, parents first.
  void apply(const std::function<void(Module&)>& fn);

 protected:
  // Registers a parameter (made a leaf that requires grad) and returns the module's own handle.
  Tensor& register_parameter(std::string name, Tensor value);
  Tensor& register_buffer(std::string name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    children_.emplace_back(std::move(name), child);
    return child;
  }

 private:
  void collect(const std::string& prefix, bool parameters, NamedTensors& out) const;

  std::deque<std::pair<std::string, Tensor>> parameters_;  // deque: stable references
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace mixprec::nn
