#pragma once
// Autoregressive sampling from a GPT. Each step runs the model on the last `context` tokens
// (the window is cropped, so generation can run past the context length), takes the logits
// of the last position in f64 and picks the next token:
//   temperature == 0: greedy (argmax; the lowest token id wins a tie);
//   temperature  > 0: softmax(logits / temperature) restricted to the top_k largest logits
//                     (top_k == 0: all of them; ties with the k-th value are kept), sampled
//                     with one uniform draw (two Generator words) per sequence per step.
// How the model runs each step (Decoding):
//   Replayed (the default): the prompt once through the KV cache (GPT::forward_cached), then each
//     new token through GPT::forward_at, replayed from a graph captured at the first such step:
//     no op front-end walked, no allocation (graph/graph.h);
//   Cached: the same steps through the op front-ends;
//   Window: the whole window every step: the reference the others are tested against.
// Past the context every mode runs the cropped window whole (learned absolute positions shift,
// so cached keys no longer apply).
// Runs under InferenceMode with the model in eval mode (dropout off); its training flag is
// restored afterwards.
#include <cstdint>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/models/gpt.h"

namespace mixprec::models {

enum class Decoding { Replayed, Cached, Window };

// prompt [B, T] i64 (T >= 1) -> [B, T + max_new_tokens] i64: the prompt, then the new tokens.
Tensor generate(GPT& model, const Tensor& prompt, int64_t max_new_tokens, double temperature,
                int64_t top_k, Generator& gen, Decoding decoding = Decoding::Replayed);
// One sequence: prompt tokens -> prompt + new tokens.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              int64_t max_new_tokens, double temperature, int64_t top_k,
                              Generator& gen, Decoding decoding = Decoding::Replayed);

// The token chosen from one row of logits by the rule above (exposed for tests).
int64_t sample_token(const std::vector<double>& logits, double temperature, int64_t top_k,
                     Generator& gen);

}  // namespace mixprec::models
