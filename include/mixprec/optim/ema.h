#pragma once
// An exponential moving average of a model's weights (Polyak averaging), the weights diffusion
// models are usually sampled from: the noise of the last steps averages out.
//
//   optim::WeightAverage ema(opt, 0.999);
//   ... opt.step(); ema.update(opt);
//   { optim::ScopedWeights averaged(model.parameters(), ema.averages());  save(model); }
//
// After every step taken, average = decay * average + (1 - decay) * w, in f32, where w is the
// f32 master weight of a 16-bit parameter (the true weight, which its 16 bits only round) or
// else the parameter itself.
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/optim/optimizer.h"

namespace mixprec::optim {

class WeightAverage {
 public:
  // Starts at the optimizer's weights. decay in [0, 1).
  WeightAverage(const Optimizer& optimizer, double decay);

  // After a step the optimizer took (a skipped step changed no weight: skip the update too).
  // The optimizer may be another one over the same parameters in the same order (rebuilt).
  void update(const Optimizer& optimizer);

  double decay() const { return decay_; }
  // One f32 tensor per parameter, in the optimizer's order; writable to restore a saved state.
  const std::vector<Tensor>& averages() const { return averages_; }
  std::vector<Tensor>& averages() { return averages_; }

 private:
  double decay_;
  std::vector<Tensor> averages_;
};

// Puts `values` into `params` (each rounded once into its parameter's dtype) for the guard's
// lifetime, then restores the parameters' own values bit for bit.
class ScopedWeights {
 public:
  ScopedWeights(std::vector<Tensor> params, const std::vector<Tensor>& values);
  ~ScopedWeights();
  ScopedWeights(const ScopedWeights&) = delete;
  ScopedWeights& operator=(const ScopedWeights&) = delete;

 private:
  std::vector<Tensor> params_, saved_;
};

}  // namespace mixprec::optim
