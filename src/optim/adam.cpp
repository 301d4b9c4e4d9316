#include "mixprec/optim/adam.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/core/profiler.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::optim::detail {
namespace {

void check_options(const AdamWOptions& o, const char* name) {
  MIXPREC_CHECK(o.lr >= 0 && std::isfinite(o.lr), "[", name, "] lr must be finite and >= 0, got ",
                o.lr);
  MIXPREC_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "[", name,
                "] betas must be in [0, 1), got ", o.beta1, " and ", o.beta2);
  MIXPREC_CHECK(o.eps >= 0 && o.weight_decay >= 0, "[", name,
                "] eps and weight_decay must be >= 0, got ", o.eps, " and ", o.weight_decay);
}

}  // namespace

AdamUpdate::AdamUpdate(std::vector<Tensor> params, const AdamWOptions& options, bool decoupled)
    : Optimizer(std::move(params), options.rounding, options.seed),
      hp_(options),
      decoupled_(decoupled) {
  check_options(options, decoupled ? "AdamW" : "Adam");
}

void AdamUpdate::set_lr(double lr) {
  AdamWOptions o = hp_;
  o.lr = lr;
  check_options(o, decoupled_ ? "AdamW" : "Adam");
  hp_.lr = lr;
}

void AdamUpdate::step() {
  const profiler::Timer timer("adam_step");
  NoGrad no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    kernels::OptimOperands ops;
    bool fresh = false;
    if (!prepare(i, ops, fresh)) continue;
    kernels::adam_step({.lr = hp_.lr,
                        .beta1 = hp_.beta1,
                        .beta2 = hp_.beta2,
                        .eps = hp_.eps,
                        .weight_decay = hp_.weight_decay,
                        .decoupled = decoupled_,
                        .step = step_count(i)},
                       ops);
  }
}

std::map<std::string, double> AdamUpdate::hyperparameters() const {
  return {{"lr", hp_.lr},
          {"beta1", hp_.beta1},
          {"beta2", hp_.beta2},
          {"eps", hp_.eps},
          {"weight_decay", hp_.weight_decay}};
}

void AdamUpdate::set_hyperparameters(const std::map<std::string, double>& values) {
  AdamWOptions o = hp_;
  o.lr = values.at("lr");
  o.beta1 = values.at("beta1");
  o.beta2 = values.at("beta2");
  o.eps = values.at("eps");
  o.weight_decay = values.at("weight_decay");
  check_options(o, decoupled_ ? "AdamW" : "Adam");
  hp_ = o;
}

}  // namespace mixprec::optim::detail

namespace mixprec::optim {

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamUpdate(std::move(params), options, true) {}

AdamWOptions AdamW::options() const {
  AdamWOptions o = hp_;
  o.rounding = rounding();
  o.seed = seed();
  return o;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : AdamUpdate(std::move(params),
                 {.lr = options.lr,
                  .beta1 = options.beta1,
                  .beta2 = options.beta2,
                  .eps = options.eps,
                  .weight_decay = options.weight_decay,
                  .rounding = options.rounding,
                  .seed = options.seed},
                 false) {}

AdamOptions Adam::options() const {
  return {.lr = hp_.lr,
          .beta1 = hp_.beta1,
          .beta2 = hp_.beta2,
          .eps = hp_.eps,
          .weight_decay = hp_.weight_decay,
          .rounding = rounding(),
          .seed = seed()};
}

}  // namespace mixprec::optim
