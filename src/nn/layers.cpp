#include "mixprec/nn/layers.h"

#include <cmath>

#include "mixprec/autograd/node.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/error.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"
#include "packed_weight_cache.h"

namespace mixprec::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen)
    : packed_(std::make_unique<PackedCache>()) {
  MIXPREC_CHECK(in_features >= 1 && out_features >= 1, "[Linear] features must be >= 1, got in ",
                in_features, " out ", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = &register_parameter("weight",
                                Tensor::uniform({out_features, in_features}, -bound, bound, gen));
  if (with_bias)
    bias_ = &register_parameter("bias", Tensor::uniform({out_features}, -bound, bound, gen));
}

struct Linear::PackedCache : detail::PackedWeightCache<kernels::PackedMatrix> {};

Linear::~Linear() = default;

Tensor Linear::forward(const Tensor& x) {
  const Tensor& w = weight();
  const Tensor b = bias();
  if (!dispatch_config().pack_inference_weights || detail::unpacked_weights() ||
      autograd::needs_grad({&x, &w, &b}) ||
      x.dtype() == DType::F64 || w.dtype() == DType::F64) {
    packed_->clear();  // training writes the weights: a packing would only hold stale memory
    return linear(x, w, b);
  }
  const auto packed = packed_->get(detail::pack_key(w, x.dtype(), 0), [&] {
    const auto [weight, x_dtype] =
        detail::operands_as_op_sees(amp::AutocastOp::Linear, w, x.dtype());
    return pack_linear_weight(weight, x_dtype);
  });
  return linear(x, packed, b);
}

std::size_t Linear::packed_bytes() const { return packed_->bytes(); }

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

Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor GELU::forward(const Tensor& x) {
  return gelu(x, tanh_ ? GeluApproximation::Tanh : GeluApproximation::None);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv2dParams params,
               bool with_bias, Generator& gen)
    : params_(params), packed_(std::make_unique<PackedCache>()) {
  MIXPREC_CHECK(in_channels >= 1 && out_channels >= 1 && kernel >= 1 && params.groups >= 1 &&
                    in_channels % params.groups == 0 && out_channels % params.groups == 0,
                "[Conv2d] channels ", in_channels, " -> ", out_channels, " with kernel ", kernel,
                " and groups ", params.groups, " do not fit");
  const double bound =
      1.0 / std::sqrt(static_cast<double>(in_channels / params.groups * kernel * kernel));
  weight_ = &register_parameter(
      "weight", Tensor::uniform({out_channels, in_channels / params.groups, kernel, kernel}, -bound,
                                bound, gen));
  if (with_bias)
    bias_ = &register_parameter("bias", Tensor::uniform({out_channels}, -bound, bound, gen));
}

struct Conv2d::PackedCache : detail::PackedWeightCache<kernels::PackedConvWeights> {};

Conv2d::~Conv2d() = default;

Tensor Conv2d::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor Conv2d::forward(const Tensor& x, const Tensor& residual) {
  const Tensor& w = weight();
  const Tensor b = bias();
  const DispatchConfig config = dispatch_config();
  if (!config.pack_inference_weights || detail::unpacked_weights() ||
      autograd::needs_grad({&x, &w, &b, &residual})) {
    packed_->clear();  // training writes the weights: a packing would only hold stale memory
    return conv2d(x, w, b, params_, residual);
  }
  // The bf16 compute mode decides how bf16 weights are packed (AMX / vdpbf16ps panels or f32).
  const int mode = static_cast<int>(config.bf16_conv);
  const auto packed = packed_->get(detail::pack_key(w, x.dtype(), mode), [&] {
    const auto [weight, x_dtype] =
        detail::operands_as_op_sees(amp::AutocastOp::Conv2d, w, x.dtype());
    return kernels::pack_conv_weights(weight, x_dtype, params_.groups);
  });
  return conv2d(x, packed, b, params_, residual);
}

std::size_t Conv2d::packed_bytes() const { return packed_->bytes(); }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight_ = &register_parameter("weight", Tensor::ones(shape_));
    bias_ = &register_parameter("bias", Tensor::zeros(shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, shape_, weight_ ? *weight_ : Tensor(), bias_ ? *bias_ : Tensor(), eps_);
}

RMSNorm::RMSNorm(Shape normalized_shape, double eps)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  weight_ = &register_parameter("weight", Tensor::ones(shape_));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, shape_, *weight_, eps_); }

GlobalResponseNorm::GlobalResponseNorm(int64_t channels, double eps) : eps_(eps) {
  MIXPREC_CHECK(channels >= 1, "[GlobalResponseNorm] expected channels >= 1, got ", channels);
  gamma_ = &register_parameter("gamma", Tensor::zeros({channels}));
  beta_ = &register_parameter("beta", Tensor::zeros({channels}));
}

Tensor GlobalResponseNorm::forward(const Tensor& x) {
  MIXPREC_CHECK(x.dim() == 4 && x.size(3) == gamma_->size(0), "[GlobalResponseNorm] expected [N, H, W, ",
                gamma_->size(0), "] (channels last), got ", shape_to_string(x.shape()));
  const DType dt = x.dtype();
  // The square root's derivative is infinite at 0: a channel that is zero everywhere would make
  // NaN gradients, so its sum of squares is floored by a tiny constant that moves nothing else.
  const Tensor norm = sqrt(add(sum(mul(x, x), {1, 2}, /*keepdim=*/true), Tensor::scalar(1e-30, dt)));
  const Tensor share = div(norm, add(mean(norm, {3}, true), Tensor::scalar(eps_, dt)));
  // x * (1 + gamma R) + beta: the [N, 1, 1, C] factor is formed first, so x is read twice, not four times.
  const Tensor factor = add(mul(*gamma_, share), Tensor::scalar(1.0, dt));
  return add(mul(x, factor), *beta_);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, kernels::Activation fused)
    : groups_(groups), eps_(eps), fused_(fused) {
  MIXPREC_CHECK(groups >= 1 && channels % groups == 0, "[GroupNorm] ", groups,
                " groups must divide ", channels, " channels");
  weight_ = &register_parameter("weight", Tensor::ones({channels}));
  bias_ = &register_parameter("bias", Tensor::zeros({channels}));
}

Tensor GroupNorm::forward(const Tensor& x) {
  return group_norm(x, groups_, *weight_, *bias_, eps_, fused_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator& gen) {
  weight_ = &register_parameter("weight", Tensor::randn({num_embeddings, dim}, gen));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(*weight_, indices); }

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, training(), *gen_); }

Tensor Upsample::forward(const Tensor& x) { return upsample(x, scale_, mode_); }

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t heads, Generator& gen)
    : embed_dim_(embed_dim), heads_(heads) {
  MIXPREC_CHECK(heads >= 1 && embed_dim % heads == 0, "[MultiheadAttention] ", heads,
                " heads must divide embed_dim ", embed_dim);
  q_ = register_module("q_proj", std::make_shared<Linear>(embed_dim, embed_dim, true, gen));
  k_ = register_module("k_proj", std::make_shared<Linear>(embed_dim, embed_dim, true, gen));
  v_ = register_module("v_proj", std::make_shared<Linear>(embed_dim, embed_dim, true, gen));
  out_ = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, true, gen));
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   bool causal) {
  MIXPREC_CHECK(query.dim() == 3 && query.size(2) == embed_dim_,
                "[MultiheadAttention] expected query [B, S, ", embed_dim_, "], got ",
                shape_to_string(query.shape()));
  const int64_t b = query.size(0), head_dim = embed_dim_ / heads_;
  auto split = [&](const Tensor& t) {  // [B, S, E] -> [B, H, S, D] (a view)
    return t.view({b, t.size(1), heads_, head_dim}).permute({0, 2, 1, 3});
  };
  const Tensor q = split(q_->forward(query)), k = split(k_->forward(key)),
               v = split(v_->forward(value));
  const Tensor o = scaled_dot_product_attention(q, k, v, {.causal = causal});  // [B, H, Sq, D]
  return out_->forward(o.permute({0, 2, 1, 3}).reshape({b, query.size(1), embed_dim_}));
}

}  // namespace mixprec::nn
