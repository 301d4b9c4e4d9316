#pragma once
// models::GPT: a decoder-only GPT-2 style language model.
//
//   tokens [B, T] -> wte[tokens] + wpe[0..T) -> dropout -> layers x GPTBlock -> ln_f
//                 -> logits = h wte^T                                    [B, T, vocab]
//
// The output head is tied to the token embedding (GPT-2): one [vocab, D] tensor is both the
// embedding table and the classifier, so its gradient is the sum of both uses.
// Initialisation is GPT-2's: every Linear and embedding weight N(0, 0.02), biases zero, and
// the projections that write into the residual stream (attn.c_proj, mlp.c_proj) N(0, 0.02 /
// sqrt(2 * layers)) so the residual's variance does not grow with depth.
//
// Precision: the model runs on whatever dtype its parameters have. f32 as built;
// model.to(DType::BF16) makes it true half precision (LayerNorms stay f32, Module::to); the
// loss is always f32 (cross_entropy). Under an amp::Autocast guard the ops follow its policy.
//
//   models::GPT model(models::GPTConfig::small(), gen);
//   Tensor logits = model(tokens);                 // tokens [B, T] i64
//   Tensor loss = model.loss(inputs, targets);     // [] f32
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/models/gpt_block.h"
#include "mixprec/nn/layers.h"

namespace mixprec::models {

struct GPTConfig {
  int64_t vocab = 256, context = 256, layers = 6, d_model = 384, heads = 6;
  double dropout = 0.0;

  // A model small enough for unit tests and golden files (2 layers, D 32, 4 heads, context 32).
  static GPTConfig tiny();
  // The training benchmark of issue #5: 6 layers, D 384, 6 heads, context 256, bytes (10,844,160
  // parameters).
  static GPTConfig small();
  // Throws mixprec::Error("[GPTConfig] ...") when a size is out of range or heads do not
  // divide d_model.
  void validate() const;
};

// Keys and values of every layer for the positions a GPT has processed: incremental decoding
// runs only the new token through the model (GPT::forward_cached, GPT::forward_at). Each layer
// holds room for the whole context, allocated by the first forward_cached; positions
// [0, length) hold values.
struct KVCache {
  std::vector<LayerKV> layers;  // one per block
  int64_t length = 0;           // positions cached
  void clear() {
    layers.clear();
    length = 0;
  }
};

class GPT final : public nn::Layer {
 public:
  // Draws the initial weights from `gen`; dropout masks come from a fork of it.
  GPT(const GPTConfig& config, Generator& gen);
  std::string_view type_name() const override { return "GPT"; }

  // tokens [B, T] (i64 or i32, values in [0, vocab), 1 <= T <= context) -> logits [B, T, vocab]
  // in the dtype of the token embedding (f32, or bf16 after to(BF16)).
  Tensor forward(const Tensor& tokens) override;
  // The final LayerNorm's output [B, T, D]: forward() is linear(hidden(tokens), wte()).
  Tensor hidden(const Tensor& tokens);
  // Logits [B, T, vocab] of tokens at positions cache.length, cache.length + 1, ...: with an
  // empty cache, any 1 <= T <= context tokens (the prompt); then one token at a time, while
  // cache.length + 1 <= context. Appends their keys and values to the cache. For inference
  // (run it under NoGrad or InferenceMode); the same logits as forward() on the whole sequence.
  Tensor forward_cached(const Tensor& tokens, KVCache& cache);
  // Logits [B, 1, vocab] of one token per sequence (tokens [B, 1]) at the position `position`
  // holds ([1] i64, 0 <= position < context), attending to the cached positions [0, position].
  // Writes the position's keys and values into the cache, which forward_cached must have
  // allocated (the prompt) for this batch; cache.length is the caller's to advance. The shapes
  // are the same at every position, so a graph captured at one step replays all the others
  // (generate() does). For inference; the same logits as forward_cached.
  Tensor forward_at(const Tensor& tokens, const Tensor& position, KVCache& cache);
  // Mean cross entropy of forward(tokens) against targets [B, T]: a [] f32 tensor.
  Tensor loss(const Tensor& tokens, const Tensor& targets);

  const GPTConfig& config() const { return config_; }
  // Activation checkpointing per block (nn::checkpoint): while recording for autograd, each
  // block but the last keeps only its input and recomputes its activations during its own
  // backward (one more block forward each), so the stored activations are one [B, T, D] tensor
  // per block instead of every intermediate. The last block's backward follows its forward at
  // once: recomputing it would free nothing at the peak. The recomputation draws the same
  // dropout masks, so losses and gradients are the same as without. Off by default; no effect
  // on forward_cached or without gradients.
  void set_activation_checkpointing(bool on) { checkpoint_blocks_ = on; }
  bool activation_checkpointing() const { return checkpoint_blocks_; }
  // Every parameter counted once (the tied head is the embedding).
  int64_t num_parameters() const;
  // "GPT: 6 layers, d_model 384, 6 heads, context 256, vocab 256: 10,844,160 parameters (f32)"
  std::string summary() const;

  const Tensor& wte() const { return token_embedding_->weight(); }     // [vocab, D], also the head
  const Tensor& wpe() const { return position_embedding_->weight(); }  // [context, D]
  GPTBlock& block(int64_t i);

 private:
  // With a cache: at positions [cache->length, + T), or at `position` when it is given.
  Tensor hidden(const Tensor& tokens, KVCache* cache, const Tensor* position = nullptr);

  GPTConfig config_;
  Generator dropout_gen_;
  std::shared_ptr<nn::Embedding> token_embedding_, position_embedding_;
  std::vector<std::shared_ptr<GPTBlock>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Dropout> dropout_;
  bool checkpoint_blocks_ = false;
};

}  // namespace mixprec::models
