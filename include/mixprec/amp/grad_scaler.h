#pragma once
// Loss scaling for 16-bit training (PyTorch's torch.cuda.amp.GradScaler state machine, plus the
// options its users ask for). Multiply the loss by `scale` so small gradients survive f16's
// range, unscale them before the optimizer, skip any step whose gradients hold inf or NaN.
//
// Dynamic scaling: a clean step advances a growth counter; after `growth_interval` clean steps
// the scale grows by `growth_factor` (never to inf). A step with inf/NaN is skipped, the counter
// resets, and after `hysteresis` such steps (DeepSpeed's tolerance; 1 = PyTorch) the scale
// shrinks by `backoff_factor`, never below `min_scale` (then `min_scale_policy` decides:
// clamp, or throw because training is diverging). Static scaling keeps the scale fixed but
// still skips non-finite steps.
#include <map>
#include <string>
#include <unordered_map>

#include "mixprec/core/communicator.h"
#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::amp {

enum class MinScalePolicy { Clamp, Error };

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;  // overflowing steps tolerated before backing off
  double min_scale = 1.0;  // the scale never goes below this
  MinScalePolicy min_scale_policy = MinScalePolicy::Clamp;
  bool dynamic = true;  // false: static scaling at init_scale
  bool enabled = true;  // false: every call is a pass-through
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (f32; differentiable). Pass-through when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides every gradient of `opt` by the scale and checks it for inf/NaN in the same pass.
  // A second call for the same optimizer before update() is an Error (as in PyTorch).
  // f32/f64 gradients are divided in place. An f16/bf16 gradient is divided in f32 and
  // *replaced* by that f32 tensor (p.grad().dtype() becomes F32): rounding the quotient back
  // to 16 bits would flush the very gradients the scale kept above f16's underflow (a true
  // gradient of 1e-8 is 0 in f16, 6.6e-4 once scaled by 65536). nn::clip_grad_norm and the
  // optimizers (which update f32 master weights) read the f32 gradient; zero_grad() drops it
  // and the next backward starts a fresh 16-bit one (or adds into the f32 one if not zeroed).
  void unscale(optim::Optimizer& opt);
  // Data-parallel training (nn/data_parallel.h), after unscale() and before step(), on every
  // rank: when any rank found an inf or NaN in any of its optimizers' gradients, every rank
  // skips this step for every optimizer, so the replicas and their scalers stay identical. (After
  // an all-reduce the gradients are the same everywhere; this also holds when they are not, say
  // an overflow in a rank's own unscale.) One max all-reduce; nothing when disabled.
  void agree_found_inf(const Communicator& world);
  // Unscales if needed, then steps unless a gradient was non-finite. Returns whether it stepped.
  bool step(optim::Optimizer& opt);
  // Applies this step's outcome to the scale (once, whatever the number of optimizers).
  void update();

  double get_scale() const { return scale_; }
  bool enabled() const { return options_.enabled; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_steps_; }  // since construction
  bool last_step_skipped() const { return last_skipped_; }

  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  struct PerOptimizer {
    bool unscaled = false;
    bool found_inf = false;
    bool stepped = false;
  };
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;
  int64_t skipped_steps_ = 0;
  bool last_skipped_ = false;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> this_step_;
};

// g *= inv_scale for every element, in one pass, rounding once into g's dtype; returns whether
// any result is inf or NaN. g must be dense (as .grad() tensors are).
bool unscale_and_check_finite(const Tensor& g, float inv_scale);
// out = g * inv_scale with out f32 (or g itself, in place), same shape and strides; one pass,
// returns whether any result is inf or NaN.
bool unscale_into(const Tensor& g, float inv_scale, const Tensor& out);

}  // namespace mixprec::amp
