#pragma once
// A tokenized text corpus split into training and validation parts, and random batches of
// [B, T + 1] windows from it (inputs = window[:, :T], targets = window[:, 1:]).
//
// Batches are drawn from a Generator: each batch consumes exactly B * 2 words of the stream
// (one 64-bit draw per window), so batch number i of a run seeded with s is a pure function
// of (s, i) and a resumed run can jump straight to it (batch_at) instead of replaying the
// draws. Philox is counter-based, so the jump costs nothing.
//
//   auto data = models::TextDataset::from_file("data/shakespeare.txt");
//   Generator gen(1234);
//   models::TokenBatch b = data.batch(models::Split::Train, 8, 256, gen);
//   Tensor loss = model.loss(b.inputs, b.targets);
#include <cstdint>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"

namespace mixprec::models {

enum class Split { Train, Validation };

struct TokenBatch {
  Tensor tokens;   // [B, T + 1] i64: the windows
  Tensor inputs;   // [B, T] i64, contiguous: tokens[:, :T]
  Tensor targets;  // [B, T] i64, contiguous: tokens[:, 1:]
};

class TextDataset {
 public:
  // The first (1 - validation_fraction) of the tokens train, the rest validate (a contiguous
  // tail, so no window straddles both). validation_fraction in [0, 1).
  explicit TextDataset(std::vector<int64_t> tokens, double validation_fraction = 0.1);
  // Reads a file's bytes through ByteTokenizer. Throws "[TextDataset] <path>: ..." when it
  // cannot be read.
  static TextDataset from_file(const std::string& path, double validation_fraction = 0.1);

  const std::vector<int64_t>& tokens(Split split) const;
  int64_t size(Split split) const { return static_cast<int64_t>(tokens(split).size()); }

  // B windows of T + 1 tokens at offsets drawn uniformly from `gen` (consuming B * 2 words).
  // Throws when the split is shorter than T + 1 tokens.
  TokenBatch batch(Split split, int64_t batch_size, int64_t seq_len, Generator& gen) const;
  // Batch number `index` (0-based) of the stream batch() makes from Generator(seed) with the
  // same split and sizes.
  TokenBatch batch_at(Split split, int64_t batch_size, int64_t seq_len, uint64_t seed,
                      int64_t index) const;
  // Generator words one batch consumes: the stride batch_at() jumps by.
  static uint64_t words_per_batch(int64_t batch_size) {
    return 2 * static_cast<uint64_t>(batch_size);
  }

 private:
  std::vector<int64_t> train_, validation_;
};

}  // namespace mixprec::models
