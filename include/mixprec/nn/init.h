#pragma once
// Parameter initialisers (PyTorch's torch.nn.init), in place, from a seeded generator. fan_in
// and fan_out follow PyTorch: for [out, in, *kernel] weights, fan_in = in * prod(kernel) and
// fan_out = out * prod(kernel).
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"

namespace mixprec::nn::init {

int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);

void uniform_(const Tensor& w, double lo, double hi, Generator& gen = default_generator());
void normal_(const Tensor& w, double mean, double std, Generator& gen = default_generator());
void zeros_(const Tensor& w);
void ones_(const Tensor& w);
// gain sqrt(2) (ReLU): U(-b, b), b = gain * sqrt(3 / fan_in); N(0, gain / sqrt(fan_in)).
void kaiming_uniform_(const Tensor& w, Generator& gen = default_generator());
void kaiming_normal_(const Tensor& w, Generator& gen = default_generator());
// U(-b, b), b = sqrt(6 / (fan_in + fan_out)); N(0, sqrt(2 / (fan_in + fan_out))).
void xavier_uniform_(const Tensor& w, Generator& gen = default_generator());
void xavier_normal_(const Tensor& w, Generator& gen = default_generator());

}  // namespace mixprec::nn::init
