#pragma once
// Layers built on the differentiable ops.
#include <cstdint>
#include <memory>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/resample.h"
#include "mixprec/nn/module.h"
#include "mixprec/ops/conv.h"

namespace mixprec::nn {

// A module with one input and one output: what Sequential chains.
class Layer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// y = x W^T + b with W [out, in], initialised like PyTorch: U(-1/sqrt(in), 1/sqrt(in)).
// Like Conv2d below, forward packs W once for inference (pack_linear_weight) when no gradient is
// needed, and remakes the packing when it would differ from a fresh one; f64 is never packed.
class Linear final : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         Generator& gen = default_generator());
  std::string_view type_name() const override { return "Linear"; }
  ~Linear() override;
  Tensor forward(const Tensor& x) override;
  const Tensor& weight() const { return *weight_; }
  Tensor bias() const { return bias_ != nullptr ? *bias_ : Tensor(); }  // undefined without bias
  std::size_t packed_bytes() const;  // memory held by the inference packing, 0 if none

 private:
  struct PackedCache;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  std::unique_ptr<PackedCache> packed_;
};

class ReLU final : public Layer {
 public:
  std::string_view type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
};

class SiLU final : public Layer {
 public:
  std::string_view type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override;
};

class GELU final : public Layer {
 public:
  explicit GELU(bool tanh_approximation = false) : tanh_(tanh_approximation) {}
  std::string_view type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x) override;

 private:
  bool tanh_;
};

// x [N, C, H, W] -> [N, O, OH, OW]; weight [O, C/groups, K, K]. PyTorch's default init
// (kaiming-uniform with a = sqrt(5): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias).
//
// When no gradient is needed (NoGrad, InferenceMode, or nothing requires one), forward packs
// the weights once (kernels::pack_conv_weights) and reuses the packing until it would differ
// from a fresh one: the weight replaced (Module::to) or written (copy_, fill_, optimizer
// steps), another input dtype, autocast state or kernel level. The result is bit-identical to
// packing per call. The packing costs about one more copy of the weights (packed_bytes());
// a forward that needs gradients drops it, and so does any forward while
// DispatchConfig::pack_inference_weights is off (core/dispatch.h).
class Conv2d final : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Conv2dParams params = {},
         bool bias = true, Generator& gen = default_generator());
  ~Conv2d() override;
  std::string_view type_name() const override { return "Conv2d"; }
  Tensor forward(const Tensor& x) override;
  // conv(x) + residual, the add fused into the convolution (ops/conv.h).
  Tensor forward(const Tensor& x, const Tensor& residual);
  const Tensor& weight() const { return *weight_; }
  Tensor bias() const { return bias_ != nullptr ? *bias_ : Tensor(); }
  std::size_t packed_bytes() const;  // memory held by the inference packing, 0 if none

 private:
  struct PackedCache;
  Conv2dParams params_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  std::unique_ptr<PackedCache> packed_;
};

// Norm layers keep f32 parameters under Module::to(half) by default (Module::is_norm_layer).
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  std::string_view type_name() const override { return "LayerNorm"; }
  Tensor forward(const Tensor& x) override;
  Tensor weight() const { return weight_ != nullptr ? *weight_ : Tensor(); }  // undefined: none
  Tensor bias() const { return bias_ != nullptr ? *bias_ : Tensor(); }
  double eps() const { return eps_; }

 private:
  Shape shape_;
  double eps_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

class RMSNorm final : public Layer {
 public:
  explicit RMSNorm(Shape normalized_shape, double eps = 1e-6);
  std::string_view type_name() const override { return "RMSNorm"; }
  Tensor forward(const Tensor& x) override;

 private:
  Shape shape_;
  double eps_;
  Tensor* weight_;
};

// GroupNorm with an optional fused activation (None or SiLU), as U-Net ResBlocks use it.
class GroupNorm final : public Layer {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps = 1e-5,
            kernels::Activation fused = kernels::Activation::None);
  std::string_view type_name() const override { return "GroupNorm"; }
  Tensor forward(const Tensor& x) override;

 private:
  int64_t groups_;
  double eps_;
  kernels::Activation fused_;
  Tensor* weight_;
  Tensor* bias_;
};

// Global Response Normalization (ConvNeXt V2) over channels-last x [N, H, W, C]: per sample and
// channel the L2 norm over the pixels, G = ||x[n, :, :, c]||; its share of the channel mean,
// R = G / (mean_c G + eps); out = x * (1 + gamma R) + beta. gamma and beta [C] start at zero
// (the layer starts as the identity). Unlike the norm layers it runs in its parameters' dtype
// (Module::to converts them), so a bf16 model stays bf16 through it.
class GlobalResponseNorm final : public Layer {
 public:
  explicit GlobalResponseNorm(int64_t channels, double eps = 1e-6);
  std::string_view type_name() const override { return "GlobalResponseNorm"; }
  Tensor forward(const Tensor& x) override;
  const Tensor& gamma() const { return *gamma_; }
  const Tensor& beta() const { return *beta_; }
  double eps() const { return eps_; }

 private:
  double eps_;
  Tensor* gamma_;
  Tensor* beta_;
};

// indices (i64/i32, any shape) -> [..., dim]; weight initialised N(0, 1) like PyTorch.
class Embedding final : public Layer {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen = default_generator());
  std::string_view type_name() const override { return "Embedding"; }
  Tensor forward(const Tensor& indices) override;
  const Tensor& weight() const { return *weight_; }

 private:
  Tensor* weight_;
};

// Zeroes elements with probability p while training (seeded by its generator).
class Dropout final : public Layer {
 public:
  explicit Dropout(double p, Generator& gen = default_generator()) : p_(p), gen_(&gen) {}
  std::string_view type_name() const override { return "Dropout"; }
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
  Generator* gen_;
};

class Upsample final : public Layer {
 public:
  Upsample(int64_t scale, kernels::UpsampleMode mode) : scale_(scale), mode_(mode) {}
  std::string_view type_name() const override { return "Upsample"; }
  Tensor forward(const Tensor& x) override;

 private:
  int64_t scale_;
  kernels::UpsampleMode mode_;
};

// Self- or cross-attention over [B, S, E] with `heads` heads on the flash attention kernel.
class MultiheadAttention final : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t heads, Generator& gen = default_generator());
  std::string_view type_name() const override { return "MultiheadAttention"; }
  // query [B, Sq, E], key/value [B, Sk, E] -> [B, Sq, E].
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, bool causal = false);
  Tensor forward(const Tensor& x, bool causal = false) { return forward(x, x, x, causal); }

 private:
  int64_t embed_dim_, heads_;
  std::shared_ptr<Linear> q_, k_, v_, out_;
};

// Runs its layers in order; children are named "0", "1", ...
class Sequential final : public Layer {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers);
  std::string_view type_name() const override { return "Sequential"; }
  void push_back(std::shared_ptr<Layer> layer);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace mixprec::nn
