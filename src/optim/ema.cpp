#include "mixprec/optim/ema.h"

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"

namespace mixprec::optim {
namespace {

// The true weight of parameter i: its f32 master if it has one.
const Tensor& weight(const Optimizer& optimizer, std::size_t i) {
  const Tensor& master = optimizer.master(i);
  return master.defined() ? master : optimizer.params()[i];
}

}  // namespace

WeightAverage::WeightAverage(const Optimizer& optimizer, double decay) : decay_(decay) {
  MIXPREC_CHECK(decay >= 0 && decay < 1, "[WeightAverage] decay must be in [0, 1), got ", decay);
  NoGrad no_grad;
  for (std::size_t i = 0; i < optimizer.params().size(); ++i)
    averages_.push_back(weight(optimizer, i).to(DType::F32).clone());
}

void WeightAverage::update(const Optimizer& optimizer) {
  MIXPREC_CHECK(optimizer.params().size() == averages_.size(), "[WeightAverage] the optimizer has ",
                optimizer.params().size(), " parameters, the average ", averages_.size());
  NoGrad no_grad;
  for (std::size_t i = 0; i < averages_.size(); ++i) {
    // average + (1 - decay) (w - average): the lerp form, exact when w equals the average.
    const Tensor& a = averages_[i];
    a.copy_(add(a, mul(sub(weight(optimizer, i).to(DType::F32), a), 1.0 - decay_)));
  }
}

ScopedWeights::ScopedWeights(std::vector<Tensor> params, const std::vector<Tensor>& values)
    : params_(std::move(params)) {
  MIXPREC_CHECK(params_.size() == values.size(), "[ScopedWeights] ", params_.size(),
                " parameters, ", values.size(), " values");
  NoGrad no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    saved_.push_back(params_[i].clone());
    params_[i].copy_(values[i]);  // one rounding into the parameter's dtype
  }
}

ScopedWeights::~ScopedWeights() {
  NoGrad no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(saved_[i]);
}

}  // namespace mixprec::optim
