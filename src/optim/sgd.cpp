#include "mixprec/optim/sgd.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/profiler.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::optim {
namespace {

void check_options(const SGDOptions& o) {
  MIXPREC_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0,
                "[SGD] lr, momentum and weight decay must be >= 0");
  MIXPREC_CHECK(!o.nesterov || o.momentum > 0, "[SGD] Nesterov needs a momentum > 0");
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.rounding, options.seed), options_(options) {
  check_options(options);
}

void SGD::set_lr(double lr) {
  SGDOptions o = options_;
  o.lr = lr;
  check_options(o);
  options_.lr = lr;
}

SGDOptions SGD::options() const {
  SGDOptions o = options_;
  o.rounding = rounding();
  o.seed = seed();
  return o;
}

void SGD::step() {
  const profiler::Timer timer("sgd_step");
  NoGrad no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    kernels::OptimOperands ops;
    bool fresh = false;
    if (!prepare(i, ops, fresh)) continue;
    kernels::sgd_step({.lr = options_.lr,
                       .momentum = options_.momentum,
                       .weight_decay = options_.weight_decay,
                       .nesterov = options_.nesterov,
                       .first = fresh},
                      ops);
  }
}

std::vector<std::string> SGD::state_names() const {
  if (options_.momentum == 0) return {};
  return {"momentum_buffer"};
}

std::map<std::string, double> SGD::hyperparameters() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

void SGD::set_hyperparameters(const std::map<std::string, double>& values) {
  SGDOptions o = options_;
  o.lr = values.at("lr");
  o.momentum = values.at("momentum");
  o.weight_decay = values.at("weight_decay");
  o.nesterov = values.at("nesterov") != 0;
  check_options(o);
  options_ = o;
}

}  // namespace mixprec::optim
