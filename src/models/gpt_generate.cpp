#include "mixprec/models/gpt_generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "mixprec/core/error.h"
#include "mixprec/graph/graph.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::models {
namespace {

// Puts the model in eval mode for the guard's lifetime.
class EvalGuard {
 public:
  explicit EvalGuard(GPT& model) : model_(model), was_training_(model.training()) { model_.eval(); }
  ~EvalGuard() { model_.train(was_training_); }
  EvalGuard(const EvalGuard&) = delete;
  EvalGuard& operator=(const EvalGuard&) = delete;

 private:
  GPT& model_;
  bool was_training_;
};

}  // namespace

int64_t sample_token(const std::vector<double>& logits, double temperature, int64_t top_k,
                     Generator& gen) {
  MIXPREC_CHECK(!logits.empty(), "[generate] no logits to sample from");
  const auto n = static_cast<int64_t>(logits.size());
  if (temperature == 0.0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  double threshold = -std::numeric_limits<double>::infinity();
  if (top_k > 0 && top_k < n) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                     std::greater<double>());
    threshold = sorted[static_cast<std::size_t>(top_k - 1)];
  }
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(logits.size(), 0.0);
  double total = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] < threshold) continue;
    weights[i] = std::exp((logits[i] - top) / temperature);  // the max maps to 1: no overflow
    total += weights[i];
  }
  MIXPREC_CHECK(total > 0.0 && std::isfinite(total),
                "[generate] the logits give no finite probabilities (NaN or inf in the model?)");
  const double u = gen.uniform_double() * total;
  double cumulative = 0.0;
  int64_t last = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (weights[static_cast<std::size_t>(i)] == 0.0) continue;
    cumulative += weights[static_cast<std::size_t>(i)];
    last = i;
    if (u < cumulative) return i;
  }
  return last;  // u rounded up to the total
}

Tensor generate(GPT& model, const Tensor& prompt, int64_t max_new_tokens, double temperature,
                int64_t top_k, Generator& gen, Decoding decoding) {
  MIXPREC_CHECK(prompt.defined() && prompt.dim() == 2 && prompt.size(1) >= 1 &&
                    (prompt.dtype() == DType::I64 || prompt.dtype() == DType::I32),
                "[generate] expected a prompt [B, T] of i64 tokens with T >= 1, got ",
                prompt.defined() ? shape_to_string(prompt.shape()) : std::string("undefined"));
  MIXPREC_CHECK(max_new_tokens >= 0, "[generate] max_new_tokens must be >= 0, got ",
                max_new_tokens);
  MIXPREC_CHECK(std::isfinite(temperature) && temperature >= 0.0,
                "[generate] temperature must be finite and >= 0, got ", temperature);
  MIXPREC_CHECK(top_k >= 0, "[generate] top_k must be >= 0 (0: no limit), got ", top_k);
  InferenceMode inference;
  EvalGuard eval(model);
  const int64_t b = prompt.size(0), t0 = prompt.size(1), total = t0 + max_new_tokens;
  const int64_t context = model.config().context, vocab = model.config().vocab;
  Tensor out = Tensor::zeros({b, total}, DType::I64);  // [B, T + new]
  out.slice(1, 0, t0).copy_(prompt);
  int64_t* seq = out.data<int64_t>();
  std::vector<double> row(static_cast<std::size_t>(vocab));
  KVCache cache;
  // Replayed: the one-token step forward_at, captured at its first call on the token and its
  // position.
  std::optional<graph::Graph> step;
  Tensor position = Tensor::zeros({1}, DType::I64);
  for (int64_t t = t0; t < total; ++t) {
    Tensor logits;  // [B, W, V]
    if (decoding == Decoding::Replayed && t <= context && cache.length > 0 &&
        cache.length == t - 1) {
      const Tensor token = out.slice(1, t - 1, t).contiguous();  // [B, 1]
      position.data<int64_t>()[0] = t - 1;
      const std::vector<Tensor> inputs{token, position};
      if (!step) {
        // The tokens must be the cached and window decodings' own: no pass that rounds
        // differently (the residual adds it would fold are a few microseconds of the step).
        graph::CaptureOptions options;
        options.fuse_epilogues = false;
        step = graph::capture(
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{model.forward_at(in[0], in[1], cache)};
            },
            inputs, options);
      }
      logits = step->run(inputs)[0];
      cache.length = t;
    } else if (decoding != Decoding::Window && t <= context) {
      // The cache holds positions [0, cache.length): feed the ones it lacks (all of the prompt
      // first, then one token per step).
      logits = model.forward_cached(out.slice(1, cache.length, t).contiguous(), cache);
    } else {
      const int64_t start = std::max<int64_t>(0, t - context);
      logits = model.forward(out.slice(1, start, t).contiguous());
    }
    const Tensor last = logits.select(1, -1).to(DType::F64).contiguous();  // [B, V]
    for (int64_t i = 0; i < b; ++i) {
      std::memcpy(row.data(), last.data<double>() + i * vocab,
                  static_cast<std::size_t>(vocab) * sizeof(double));
      seq[i * total + t] = sample_token(row, temperature, top_k, gen);
    }
  }
  return out;
}

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              int64_t max_new_tokens, double temperature, int64_t top_k,
                              Generator& gen, Decoding decoding) {
  MIXPREC_CHECK(!prompt.empty(), "[generate] the prompt needs at least one token");
  const Tensor p = Tensor::from_vector(prompt, Shape{1, static_cast<int64_t>(prompt.size())});
  const Tensor out = generate(model, p, max_new_tokens, temperature, top_k, gen, decoding);
  const int64_t* data = out.data<int64_t>();
  return std::vector<int64_t>(data, data + out.numel());
}

}  // namespace mixprec::models
