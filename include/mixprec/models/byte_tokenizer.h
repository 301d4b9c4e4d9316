#pragma once
// Byte-level tokenizer: token i is byte i (0..255), so every string, valid UTF-8 or not and
// NUL bytes included, encodes losslessly and decode(encode(s)) == s. The GPT's vocab of 256.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::models {

struct ByteTokenizer {
  static constexpr int64_t kVocab = 256;

  static std::vector<int64_t> encode(std::string_view text);
  // A 1-D i64 tensor of the bytes.
  static Tensor encode_tensor(std::string_view text);
  // Throws mixprec::Error("[ByteTokenizer] ...") naming the position of a token outside
  // [0, 256).
  static std::string decode(std::span<const int64_t> tokens);
  // tokens: 1-D, i64 or i32.
  static std::string decode(const Tensor& tokens);
};

}  // namespace mixprec::models
