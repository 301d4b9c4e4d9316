#include "mixprec/nn/layers.h"

#include <cmath>

#include "mixprec/core/error.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/linalg.h"

namespace mixprec::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen) {
  MIXPREC_CHECK(in_features >= 1 && out_features >= 1, "[Linear] features must be >= 1, got in ", in_features,
                " out ", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = &register_parameter("weight", Tensor::uniform({out_features, in_features}, -bound, bound, gen));
  if (with_bias) bias_ = &register_parameter("bias", Tensor::uniform({out_features}, -bound, bound, gen));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight(), bias()); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Sequential::Sequential(std::vector<std::shared_ptr<Layer>> layers) {
  for (auto& layer : layers) push_back(std::move(layer));
}

void Sequential::push_back(std::shared_ptr<Layer> layer) {
  MIXPREC_CHECK(layer != nullptr, "[Sequential] cannot add a null layer");
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace mixprec::nn
