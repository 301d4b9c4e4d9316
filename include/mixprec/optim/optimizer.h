#pragma once
// The interface every optimizer implements, so loss scaling, gradient clipping and checkpoints
// work on any of them, and the per-parameter machinery they all share:
//
//   step count   per parameter, advanced on each update that parameter takes (parameters
//                without a gradient are skipped and keep theirs, as in PyTorch);
//   master       an f32 copy of every f16/bf16 parameter, created from the parameter on its
//                first update. Updates are computed on the master and rounded into the
//                parameter (to nearest even, or stochastically), so updates smaller than half
//                a 16-bit ulp accumulate instead of vanishing. Change a 16-bit parameter's
//                values yourself after it has been stepped (loading weights, say) and you must
//                call reset_master_weights(), or the next step overwrites your values;
//   state        the optimizer's own tensors (moments, momentum): f32, f64 for f64 parameters.
//
// An optimizer holds the parameter tensors it was given: build it after Module::to(dtype) or
// Module::to(MemoryFormat), which replace a module's parameters with new tensors.
//
// Gradients may be any float dtype. After GradScaler::unscale a 16-bit parameter's .grad() is
// f32 (see amp/grad_scaler.h); the update reads whichever it finds.
//
// state_dict() names tensors "<i>.<field>" with i the parameter's position: "0.step" (i64,
// 0-d), "0.master" (f32, 16-bit parameters only), "0.exp_avg", ... Parameters that were never
// stepped have no entries. The tensors share storage with the optimizer (clone to snapshot).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/optim.h"

namespace mixprec::optim {

using Rounding = kernels::Rounding;  // NearestEven or Stochastic, for 16-bit parameters

struct OptimizerState {
  std::string type;                               // "AdamW", "Adam", "SGD"
  std::map<std::string, double> hyperparameters;  // "lr", ..., "rounding" (0 nearest even,
                                                  // 1 stochastic), "num_params"
  uint64_t seed = 0;                              // of stochastic rounding
  std::vector<std::pair<std::string, Tensor>> tensors;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, Rounding rounding = Rounding::NearestEven,
                     uint64_t seed = 0);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;  // parameters without a gradient are skipped
  void zero_grad();         // drops every parameter's gradient
  const std::vector<Tensor>& params() const { return params_; }

  virtual std::string_view type_name() const = 0;  // "AdamW"
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;  // for learning-rate schedules
  Rounding rounding() const { return rounding_; }
  uint64_t seed() const { return seed_; }

  int64_t step_count(std::size_t i) const;  // updates parameter i has taken
  // Parameter i's f32 master weight; undefined for f32/f64 parameters and before the first step.
  const Tensor& master(std::size_t i) const;
  // Parameter i's state tensor `name` ("exp_avg", "momentum_buffer"); undefined before its
  // first step. Throws for a name this optimizer does not keep.
  const Tensor& state(std::size_t i, std::string_view name) const;
  // Copies every 16-bit parameter into its master weight again (after changing parameters).
  void reset_master_weights();

  virtual OptimizerState state_dict() const;
  // Restores steps, master weights, state and hyper-parameters (as PyTorch, the saved
  // hyper-parameters replace the current ones). Everything is validated before anything
  // changes: type, parameter count, names, dtypes and shapes; a mismatch throws an Error.
  virtual void load_state_dict(const OptimizerState& state);

 protected:
  // The per-parameter state tensors this optimizer keeps, in kernel order (state0, state1).
  virtual std::vector<std::string> state_names() const = 0;
  virtual std::map<std::string, double> hyperparameters() const = 0;
  // Called with a map holding every key hyperparameters() returns; validates, then sets.
  virtual void set_hyperparameters(const std::map<std::string, double>& values) = 0;

  // For step(): false when parameter i has no gradient. Otherwise advances its step count,
  // creates its master weight and zeroed state on first use (`fresh` says so), and fills the
  // kernel operands.
  bool prepare(std::size_t i, kernels::OptimOperands& ops, bool& fresh);

  std::vector<Tensor> params_;

 private:
  struct Slot {
    int64_t step = 0;
    Tensor master;
    std::vector<Tensor> state;  // one per state_names()
  };
  // Checks s.tensors against the parameters and state_names(); fills `loaded` (one per param).
  void validate_tensors(const OptimizerState& s, const std::string& op,
                        std::vector<Slot>& loaded) const;

  std::vector<Slot> slots_;
  Rounding rounding_;
  uint64_t seed_;
};

}  // namespace mixprec::optim
