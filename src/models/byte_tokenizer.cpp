#include "mixprec/models/byte_tokenizer.h"

#include "mixprec/core/error.h"

namespace mixprec::models {

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<int64_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i)
    tokens[i] = static_cast<int64_t>(static_cast<unsigned char>(text[i]));
  return tokens;
}

Tensor ByteTokenizer::encode_tensor(std::string_view text) {
  return Tensor::from_vector(encode(text));
}

std::string ByteTokenizer::decode(std::span<const int64_t> tokens) {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    MIXPREC_CHECK(tokens[i] >= 0 && tokens[i] < kVocab, "[ByteTokenizer] token ", tokens[i],
                  " at position ", i, " is not a byte (expected 0..255)");
    text[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

std::string ByteTokenizer::decode(const Tensor& tokens) {
  MIXPREC_CHECK(tokens.defined() && tokens.dim() == 1 &&
                    (tokens.dtype() == DType::I64 || tokens.dtype() == DType::I32),
                "[ByteTokenizer] expected a 1-D i64 or i32 tensor of tokens, got ",
                tokens.defined() ? shape_to_string(tokens.shape()) + " " +
                                       std::string(dtype_name(tokens.dtype()))
                                 : std::string("undefined"));
  const Tensor t = tokens.to(DType::I64).contiguous();
  return decode(std::span<const int64_t>(t.numel() > 0 ? t.data<int64_t>() : nullptr,
                                         static_cast<std::size_t>(t.numel())));
}

}  // namespace mixprec::models
