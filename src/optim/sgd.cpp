#include "mixprec/optim/sgd.h"

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/kernels/elementwise.h"

namespace mixprec::optim {

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad();
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params)), momentum_(params_.size()), options_(options) {
  MIXPREC_CHECK(options.lr >= 0 && options.momentum >= 0 && options.weight_decay >= 0,
                "[SGD] lr, momentum and weight decay must be >= 0");
  MIXPREC_CHECK(!options.nesterov || options.momentum > 0, "[SGD] Nesterov needs a momentum > 0");
}

void SGD::step() {
  NoGrad no_grad;
  using kernels::axpby;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const DType state_dtype = p.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor d = p.grad().to(state_dtype);
    if (d.shares_storage(p.grad())) d = d.clone();
    if (options_.weight_decay != 0) axpby(1.0, d, options_.weight_decay, p, d);  // d = g + wd p
    if (options_.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) {
        buf = d.clone();
      } else {
        axpby(options_.momentum, buf, 1.0, d, buf);  // buf = momentum buf + d
      }
      if (options_.nesterov)
        axpby(1.0, d, options_.momentum, buf, d);  // d = d + momentum buf
      else
        d = buf;
    }
    axpby(1.0, p, -options_.lr, d, p);  // p -= lr d, rounded once into p's dtype
  }
}

}  // namespace mixprec::optim
