#pragma once
// Autoregressive sampling from a GPT. Each step runs the model on the last `context` tokens
// (the window is cropped, so generation can run past the context length), takes the logits
// of the last position in f64 and picks the next token:
//   temperature == 0: greedy (argmax; the lowest token id wins a tie);
//   temperature  > 0: softmax(logits / temperature) restricted to the top_k largest logits
//                     (top_k == 0: all of them; ties with the k-th value are kept), sampled
//                     with one uniform draw (two Generator words) per sequence per step.
// With `kv_cache` (the default) the prompt runs once and each step then feeds only the newest
// token (GPT::forward_cached), while the sequence fits the context; past it, every step runs
// the cropped window whole (learned absolute positions shift, so cached keys no longer apply).
// Without it every step runs the whole window: the reference the cached path is tested against.
// Runs under InferenceMode with the model in eval mode (dropout off); its training flag is
// restored afterwards.
#include <cstdint>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/models/gpt.h"

namespace mixprec::models {

// prompt [B, T] i64 (T >= 1) -> [B, T + max_new_tokens] i64: the prompt, then the new tokens.
Tensor generate(GPT& model, const Tensor& prompt, int64_t max_new_tokens, double temperature,
                int64_t top_k, Generator& gen, bool kv_cache = true);
// One sequence: prompt tokens -> prompt + new tokens.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              int64_t max_new_tokens, double temperature, int64_t top_k,
                              Generator& gen, bool kv_cache = true);

// The token chosen from one row of logits by the rule above (exposed for tests).
int64_t sample_token(const std::vector<double>& logits, double temperature, int64_t top_k,
                     Generator& gen);

}  // namespace mixprec::models
