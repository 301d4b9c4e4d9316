#include "mixprec/models/text_dataset.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "mixprec/core/error.h"
#include "mixprec/models/byte_tokenizer.h"

namespace mixprec::models {

TextDataset::TextDataset(std::vector<int64_t> tokens, double validation_fraction) {
  MIXPREC_CHECK(validation_fraction >= 0.0 && validation_fraction < 1.0,
                "[TextDataset] validation_fraction must be in [0, 1), got ", validation_fraction);
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_train = n - static_cast<int64_t>(static_cast<double>(n) * validation_fraction);
  validation_.assign(tokens.begin() + n_train, tokens.end());
  tokens.resize(static_cast<std::size_t>(n_train));
  train_ = std::move(tokens);
}

TextDataset TextDataset::from_file(const std::string& path, double validation_fraction) {
  // An ifstream opens a directory and reads nothing from it ("0 tokens" would be the symptom).
  MIXPREC_CHECK(!std::filesystem::is_directory(path), "[TextDataset] ", path,
                ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  MIXPREC_CHECK(in.good(), "[TextDataset] ", path, ": cannot open (", std::strerror(errno), ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  MIXPREC_CHECK(!in.bad(), "[TextDataset] ", path, ": read error");
  return TextDataset(ByteTokenizer::encode(bytes.str()), validation_fraction);
}

const std::vector<int64_t>& TextDataset::tokens(Split split) const {
  return split == Split::Train ? train_ : validation_;
}

TokenBatch TextDataset::batch(Split split, int64_t batch_size, int64_t seq_len,
                              Generator& gen) const {
  const std::vector<int64_t>& src = tokens(split);
  const int64_t window = seq_len + 1;
  MIXPREC_CHECK(batch_size >= 1 && seq_len >= 1, "[TextDataset] batch size ", batch_size,
                " and sequence length ", seq_len, " must be >= 1");
  MIXPREC_CHECK(static_cast<int64_t>(src.size()) >= window, "[TextDataset] the ",
                split == Split::Train ? "training" : "validation", " split has ", src.size(),
                " tokens, fewer than one window of ", window);
  const auto starts = static_cast<uint64_t>(static_cast<int64_t>(src.size()) - window + 1);
  TokenBatch out;
  out.tokens = Tensor::empty({batch_size, window}, DType::I64);
  int64_t* dst = out.tokens.data<int64_t>();  // [B, T + 1]
  for (int64_t b = 0; b < batch_size; ++b) {
    // A 64-bit draw modulo a corpus size under 2^40 is uniform to within 2^-24.
    const auto start = static_cast<std::size_t>(gen.next_u64() % starts);
    std::memcpy(dst + b * window, src.data() + start,
                static_cast<std::size_t>(window) * sizeof(int64_t));
  }
  out.inputs = out.tokens.slice(1, 0, seq_len).contiguous();
  out.targets = out.tokens.slice(1, 1, window).contiguous();
  return out;
}

TokenBatch TextDataset::batch_at(Split split, int64_t batch_size, int64_t seq_len, uint64_t seed,
                                 int64_t index) const {
  MIXPREC_CHECK(index >= 0, "[TextDataset] batch index must be >= 0, got ", index);
  Generator gen(seed);
  gen.set_state({seed, static_cast<uint64_t>(index) * words_per_batch(batch_size)});
  return batch(split, batch_size, seq_len, gen);
}

}  // namespace mixprec::models
