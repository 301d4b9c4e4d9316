#include "mixprec/nn/init.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::nn::init {
namespace {

int64_t receptive_field(const Tensor& w) {
  int64_t r = 1;
  for (int64_t d = 2; d < w.dim(); ++d) r *= w.size(d);
  return r;
}

void fill_from(const Tensor& w, const Tensor& values) {
  NoGrad no_grad;  // an initialiser writes into a parameter without recording
  w.copy_(values);
}

}  // namespace

int64_t fan_in(const Tensor& w) {
  MIXPREC_CHECK(w.dim() >= 2, "[init] fan in/out need a weight of at least 2 dims, got ",
                shape_to_string(w.shape()));
  return w.size(1) * receptive_field(w);
}

int64_t fan_out(const Tensor& w) {
  MIXPREC_CHECK(w.dim() >= 2, "[init] fan in/out need a weight of at least 2 dims, got ",
                shape_to_string(w.shape()));
  return w.size(0) * receptive_field(w);
}

void uniform_(const Tensor& w, double lo, double hi, Generator& gen) {
  fill_from(w, Tensor::uniform(w.shape(), lo, hi, gen,
                               w.dtype() == DType::F64 ? DType::F64 : DType::F32));
}

void normal_(const Tensor& w, double mean, double std, Generator& gen) {
  fill_from(w, Tensor::normal(w.shape(), mean, std, gen,
                              w.dtype() == DType::F64 ? DType::F64 : DType::F32));
}

void zeros_(const Tensor& w) { fill_from(w, Tensor::zeros(w.shape())); }
void ones_(const Tensor& w) { fill_from(w, Tensor::ones(w.shape())); }

void kaiming_uniform_(const Tensor& w, Generator& gen) {
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / static_cast<double>(fan_in(w)));
  uniform_(w, -bound, bound, gen);
}

void kaiming_normal_(const Tensor& w, Generator& gen) {
  normal_(w, 0.0, std::sqrt(2.0) / std::sqrt(static_cast<double>(fan_in(w))), gen);
}

void xavier_uniform_(const Tensor& w, Generator& gen) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in(w) + fan_out(w)));
  uniform_(w, -bound, bound, gen);
}

void xavier_normal_(const Tensor& w, Generator& gen) {
  normal_(w, 0.0, std::sqrt(2.0 / static_cast<double>(fan_in(w) + fan_out(w))), gen);
}

}  // namespace mixprec::nn::init
