#pragma once
// The pieces of a GPT-2 style decoder block (pre-norm):
//   x = x + dropout(attn(ln_1(x)));   x = x + dropout(mlp(ln_2(x)))
// Names follow GPT-2's checkpoints (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj) so state dicts line up with PyTorch ports (tools/make_gpt_golden.py).
#include <cstdint>
#include <memory>

#include "mixprec/core/random.h"
#include "mixprec/nn/layers.h"

namespace mixprec::models {

// One layer's keys and values, [B, H, capacity, head_dim] each (no autograd history), allocated
// by the first call that writes them: zeros, in the dtype of the projections. Which positions
// hold values is the caller's to know (KVCache::length).
struct LayerKV {
  Tensor k, v;
};

// Where a call's keys and values go in a layer's cache, and which cached keys its queries see.
//   position == nullptr: the T positions [past, past + T) are written; T queries attend
//     causally over [0, past + T) (past > 0 takes one position, T == 1).
//   position != nullptr: one position (T == 1), the one `position` ([1] i64) holds when the
//     kernels run, is written, and the query attends over the keys [0, position]. Static
//     shapes: a graph captured at one position replays at every other.
struct KVSlot {
  LayerKV* kv = nullptr;
  int64_t capacity = 0;
  int64_t past = 0;
  const Tensor* position = nullptr;
};

// Causal multi-head self-attention on the flash attention op. One fused projection makes q, k
// and v (one GEMM of width 3D instead of three of width D); without a KV cache,
// multi_head_attention_packed reads the heads from it in place, writes them merged into
// [B, T, D] and gives it one gradient. With a cache the heads are views of it, split by hand.
// Attention-probability dropout is not applied: the flash kernel never materialises the
// probabilities; dropout acts on the block's residual branch instead.
class CausalSelfAttention final : public nn::Layer {
 public:
  CausalSelfAttention(int64_t d_model, int64_t heads, Generator& gen);
  std::string_view type_name() const override { return "CausalSelfAttention"; }
  // x [B, T, D] -> [B, T, D]
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  // With a cache slot: x's keys and values are written into it and the queries read it (KVSlot).
  Tensor forward(const Tensor& x, const KVSlot* slot);

  nn::Linear& c_attn() { return *c_attn_; }  // [3D, D]: rows q, then k, then v
  nn::Linear& c_proj() { return *c_proj_; }  // [D, D]

 private:
  int64_t d_model_, heads_;
  std::shared_ptr<nn::Linear> c_attn_, c_proj_;
};

// Linear D -> 4D, GELU (tanh approximation, as GPT-2), Linear 4D -> D.
class GPTMLP final : public nn::Layer {
 public:
  GPTMLP(int64_t d_model, Generator& gen);
  std::string_view type_name() const override { return "GPTMLP"; }
  Tensor forward(const Tensor& x) override;  // [..., D] -> [..., D]

  nn::Linear& c_fc() { return *c_fc_; }
  nn::Linear& c_proj() { return *c_proj_; }

 private:
  std::shared_ptr<nn::Linear> c_fc_, c_proj_;
};

// `dropout_gen` must outlive the block (the GPT model owns it).
class GPTBlock final : public nn::Layer {
 public:
  GPTBlock(int64_t d_model, int64_t heads, double dropout, Generator& init_gen,
           Generator& dropout_gen);
  std::string_view type_name() const override { return "GPTBlock"; }
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }  // [B, T, D]
  Tensor forward(const Tensor& x, const KVSlot* slot);

  CausalSelfAttention& attn() { return *attn_; }
  GPTMLP& mlp() { return *mlp_; }

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GPTMLP> mlp_;
  std::shared_ptr<nn::Dropout> dropout_;
};

}  // namespace mixprec::models
