#include "mixprec/models/gpt_block.h"

#include "mixprec/core/error.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/functional.h"

namespace mixprec::models {

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t heads, Generator& gen)
    : d_model_(d_model), heads_(heads) {
  MIXPREC_CHECK(d_model >= 1 && heads >= 1 && d_model % heads == 0, "[CausalSelfAttention] ", heads,
                " heads must divide d_model ", d_model);
  c_attn_ =
      register_module("c_attn", std::make_shared<nn::Linear>(d_model, 3 * d_model, true, gen));
  c_proj_ = register_module("c_proj", std::make_shared<nn::Linear>(d_model, d_model, true, gen));
}

Tensor CausalSelfAttention::forward(const Tensor& x, const KVSlot* slot) {
  MIXPREC_CHECK(x.dim() == 3 && x.size(2) == d_model_, "[CausalSelfAttention] expected x [B, T, ",
                d_model_, "], got ", shape_to_string(x.shape()));
  const int64_t b = x.size(0), t = x.size(1), head_dim = d_model_ / heads_;
  const Tensor qkv = c_attn_->forward(x);  // [B, T, 3D]
  if (slot == nullptr)  // the heads read from qkv and written into [B, T, D] in place
    return c_proj_->forward(multi_head_attention_packed(qkv, heads_, {.causal = true}));
  auto head_view = [&](int64_t part) {  // [B, T, D] slice -> [B, H, T, hd], no copy
    return qkv.slice(2, part * d_model_, (part + 1) * d_model_)
        .view({b, t, heads_, head_dim})
        .permute({0, 2, 1, 3});
  };
  const Tensor k = head_view(1).detach(), v = head_view(2).detach();
  LayerKV& kv = *slot->kv;
  const Shape cache_shape{b, heads_, slot->capacity, head_dim};
  if (!kv.k.defined() || kv.k.shape() != cache_shape || kv.k.dtype() != k.dtype()) {
    MIXPREC_CHECK(slot->position == nullptr && slot->past == 0,
                  "[CausalSelfAttention] the KV cache holds no [", b, ", ", heads_, ", ",
                  slot->capacity, ", ", head_dim, "] ", dtype_name(k.dtype()),
                  " keys to continue from (fill it with the prompt first)");
    // Zeros: a position read before it is written (a caller skipping one) reads 0, not garbage.
    kv.k = Tensor::zeros(cache_shape, k.dtype());
    kv.v = Tensor::zeros(cache_shape, v.dtype());
  }
  Tensor y;  // [B, H, T, hd]
  if (slot->position != nullptr) {
    MIXPREC_CHECK(t == 1,
                  "[CausalSelfAttention] a step at a position held in a tensor takes one "
                  "position, got ",
                  t);
    index_copy_(kv.k, 2, *slot->position, k);
    index_copy_(kv.v, 2, *slot->position, v);
    y = scaled_dot_product_attention(head_view(0), kv.k, kv.v, {.last_key = *slot->position});
  } else {
    const int64_t past = slot->past;
    MIXPREC_CHECK(past == 0 || t == 1,
                  "[CausalSelfAttention] a filled KV cache takes one new position at a time, got ",
                  t, " after ", past);
    kv.k.narrow(2, past, t).copy_(k);
    kv.v.narrow(2, past, t).copy_(v);
    // The one new query of a filled cache sees every earlier position and itself.
    y = scaled_dot_product_attention(head_view(0), kv.k.narrow(2, 0, past + t),
                                     kv.v.narrow(2, 0, past + t), {.causal = past == 0});
  }
  return c_proj_->forward(y.permute({0, 2, 1, 3}).reshape({b, t, d_model_}));
}

GPTMLP::GPTMLP(int64_t d_model, Generator& gen) {
  c_fc_ = register_module("c_fc", std::make_shared<nn::Linear>(d_model, 4 * d_model, true, gen));
  c_proj_ =
      register_module("c_proj", std::make_shared<nn::Linear>(4 * d_model, d_model, true, gen));
}

Tensor GPTMLP::forward(const Tensor& x) {
  return c_proj_->forward(gelu(c_fc_->forward(x), GeluApproximation::Tanh));
}

GPTBlock::GPTBlock(int64_t d_model, int64_t heads, double dropout, Generator& init_gen,
                   Generator& dropout_gen) {
  ln_1_ = register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{d_model}));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(d_model, heads, init_gen));
  ln_2_ = register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{d_model}));
  mlp_ = register_module("mlp", std::make_shared<GPTMLP>(d_model, init_gen));
  dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(dropout, dropout_gen));
}

Tensor GPTBlock::forward(const Tensor& x, const KVSlot* slot) {
  const Tensor h = add(x, dropout_->forward(attn_->forward(ln_1_->forward(x), slot)));
  return add(h, dropout_->forward(mlp_->forward(ln_2_->forward(h))));
}

}  // namespace mixprec::models
