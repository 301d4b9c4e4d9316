#include "mixprec/models/gpt.h"

#include <cmath>
#include <sstream>

#include "mixprec/core/error.h"
#include "mixprec/nn/checkpoint.h"
#include "mixprec/nn/init.h"
#include "mixprec/nn/precision.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"

namespace mixprec::models {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2

// 10754304 -> "10,754,304"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void init_linear(nn::Linear& layer, double std, Generator& gen) {
  nn::init::normal_(layer.weight(), 0.0, std, gen);
  nn::init::zeros_(layer.bias());
}

}  // namespace

GPTConfig GPTConfig::tiny() {
  return {.vocab = 256, .context = 32, .layers = 2, .d_model = 32, .heads = 4, .dropout = 0.0};
}

GPTConfig GPTConfig::small() {
  return {.vocab = 256, .context = 256, .layers = 6, .d_model = 384, .heads = 6, .dropout = 0.0};
}

void GPTConfig::validate() const {
  MIXPREC_CHECK(vocab >= 1 && context >= 1 && layers >= 0 && d_model >= 1 && heads >= 1,
                "[GPTConfig] sizes must be positive: vocab ", vocab, ", context ", context,
                ", layers ", layers, ", d_model ", d_model, ", heads ", heads);
  MIXPREC_CHECK(d_model % heads == 0, "[GPTConfig] ", heads, " heads must divide d_model ",
                d_model);
  MIXPREC_CHECK(dropout >= 0.0 && dropout < 1.0, "[GPTConfig] dropout must be in [0, 1), got ",
                dropout);
}

GPT::GPT(const GPTConfig& config, Generator& gen) : config_(config), dropout_gen_(gen.fork()) {
  config_.validate();
  const int64_t d = config_.d_model;
  token_embedding_ = register_module("wte", std::make_shared<nn::Embedding>(config_.vocab, d, gen));
  position_embedding_ =
      register_module("wpe", std::make_shared<nn::Embedding>(config_.context, d, gen));
  dropout_ =
      register_module("dropout", std::make_shared<nn::Dropout>(config_.dropout, dropout_gen_));
  for (int64_t i = 0; i < config_.layers; ++i)
    blocks_.push_back(register_module(
        "h." + std::to_string(i),
        std::make_shared<GPTBlock>(d, config_.heads, config_.dropout, gen, dropout_gen_)));
  ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{d}));

  // GPT-2 initialisation, in a fixed order so a seed always gives the same model (the
  // modules' own PyTorch-default draws above are overwritten).
  nn::init::normal_(wte(), 0.0, kInitStd, gen);
  nn::init::normal_(wpe(), 0.0, kInitStd, gen);
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(config_.layers));
  for (auto& block : blocks_) {
    init_linear(block->attn().c_attn(), kInitStd, gen);
    init_linear(block->attn().c_proj(), residual_std, gen);
    init_linear(block->mlp().c_fc(), kInitStd, gen);
    init_linear(block->mlp().c_proj(), residual_std, gen);
  }
}

Tensor GPT::forward(const Tensor& tokens) {
  return linear(hidden(tokens), wte());  // tied head: [B, T, D] x [V, D]^T -> [B, T, V]
}

Tensor GPT::hidden(const Tensor& tokens) { return hidden(tokens, nullptr); }

Tensor GPT::forward_cached(const Tensor& tokens, KVCache& cache) {
  return linear(hidden(tokens, &cache), wte());
}

Tensor GPT::forward_at(const Tensor& tokens, const Tensor& position, KVCache& cache) {
  MIXPREC_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) == 1,
                "[GPT] forward_at takes one token per sequence [B, 1], got ",
                tokens.defined() ? shape_to_string(tokens.shape()) : std::string("undefined"));
  MIXPREC_CHECK(
      position.defined() && position.shape() == Shape{1} && position.dtype() == DType::I64,
      "[GPT] forward_at's position must be an i64 [1] tensor");
  MIXPREC_CHECK(cache.layers.size() == blocks_.size(),
                "[GPT] forward_at continues a KV cache the prompt filled (forward_cached)");
  return linear(hidden(tokens, &cache, &position), wte());
}

Tensor GPT::hidden(const Tensor& tokens, KVCache* cache, const Tensor* position) {
  MIXPREC_CHECK(tokens.defined() && tokens.dim() == 2, "[GPT] expected tokens [B, T], got ",
                tokens.defined() ? shape_to_string(tokens.shape()) : std::string("undefined"));
  MIXPREC_CHECK(tokens.dtype() == DType::I64 || tokens.dtype() == DType::I32,
                "[GPT] tokens must be i64 or i32, got ", dtype_name(tokens.dtype()));
  const int64_t t = tokens.size(1);
  const int64_t past = cache != nullptr && position == nullptr ? cache->length : 0;
  MIXPREC_CHECK(t >= 1 && past + t <= config_.context, "[GPT] sequence length ", t,
                past > 0 ? " after " + std::to_string(past) + " cached positions" : std::string(),
                " must be in [1, context = ", config_.context, "]");
  if (cache != nullptr) cache->layers.resize(blocks_.size());
  const Tensor positions =
      position != nullptr ? *position
                          : Tensor::arange(static_cast<double>(past), static_cast<double>(past + t),
                                           1.0, DType::I64);  // [T]
  // [B, T, D] + [T, D] broadcast over the batch
  Tensor x = add(token_embedding_->forward(tokens), position_embedding_->forward(positions));
  x = dropout_->forward(x);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    // A block a precision plan stores in other bits than the stream's computes in them.
    x = nn::as_input_of(*blocks_[i], x);
    // Not the last block: its backward comes right after its forward, so recomputing it
    // would cost a block forward and free no memory at the peak (the start of backward).
    if (checkpoint_blocks_ && cache == nullptr && i + 1 < blocks_.size()) {
      // The node keeps the block alive until its backward ran (or the graph is dropped).
      const std::shared_ptr<GPTBlock> block = blocks_[i];
      x = nn::checkpoint([block](const std::vector<Tensor>& in) { return block->forward(in[0]); },
                         {x}, dropout_gen_);
    } else if (cache != nullptr) {
      const KVSlot slot{&cache->layers[i], config_.context, past, position};
      x = blocks_[i]->forward(x, &slot);
    } else {
      x = blocks_[i]->forward(x);
    }
  }
  if (cache != nullptr && position == nullptr) cache->length += t;
  return ln_f_->forward(x);
}

Tensor GPT::loss(const Tensor& tokens, const Tensor& targets) {
  MIXPREC_CHECK(targets.defined() && tokens.defined() && targets.shape() == tokens.shape(),
                "[GPT] targets must have the tokens' shape ",
                tokens.defined() ? shape_to_string(tokens.shape()) : std::string("undefined"),
                ", got ",
                targets.defined() ? shape_to_string(targets.shape()) : std::string("undefined"));
  const Tensor logits = forward(tokens);  // [B, T, V]
  const int64_t n = tokens.size(0) * tokens.size(1);
  return cross_entropy(logits.reshape({n, config_.vocab}), targets.reshape({n}));
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

std::string GPT::summary() const {
  std::ostringstream out;
  out << "GPT: " << config_.layers << " layers, d_model " << config_.d_model << ", "
      << config_.heads << " heads, context " << config_.context << ", vocab " << config_.vocab
      << ": " << with_commas(num_parameters()) << " parameters (" << dtype_name(wte().dtype())
      << ")";
  return out.str();
}

GPTBlock& GPT::block(int64_t i) {
  MIXPREC_CHECK(i >= 0 && i < static_cast<int64_t>(blocks_.size()), "[GPT] block ", i,
                " out of range for ", blocks_.size(), " layers");
  return *blocks_[static_cast<std::size_t>(i)];
}

}  // namespace mixprec::models
