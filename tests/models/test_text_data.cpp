// ByteTokenizer and TextDataset: lossless round trips, bad tokens, deterministic and resumable
// batches, and the shipped corpus.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "mixprec/core/error.h"
#include "mixprec/models/byte_tokenizer.h"
#include "mixprec/models/text_dataset.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

const std::string kCorpus = std::string(MIXPREC_SOURCE_DIR) + "/data/shakespeare.txt";

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  all += "To be, or not to be: \xC3\xA9t\xC3\xA9 \xFF\xFE (not UTF-8) \0 end";
  const std::vector<int64_t> tokens = ByteTokenizer::encode(all);
  ASSERT_EQ(tokens.size(), all.size());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(tokens[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(ByteTokenizer::decode(tokens), all);
  const Tensor t = ByteTokenizer::encode_tensor("Hamlet");
  EXPECT_EQ(t.dtype(), DType::I64);
  EXPECT_EQ(t.shape(), (Shape{6}));
  EXPECT_EQ(t.at<int64_t>({0}), 'H');
  EXPECT_EQ(ByteTokenizer::decode(t), "Hamlet");
  EXPECT_EQ(ByteTokenizer::decode(t.to(DType::I32)), "Hamlet");
  EXPECT_EQ(ByteTokenizer::decode(std::vector<int64_t>{}), "");
  EXPECT_TRUE(ByteTokenizer::encode("").empty());
}

TEST(ByteTokenizer, RejectsTokensThatAreNotBytes) {
  for (const int64_t bad : {int64_t{256}, int64_t{-1}, int64_t{1} << 40}) {
    try {
      ByteTokenizer::decode(std::vector<int64_t>{72, 105, bad});
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[ByteTokenizer] token " + std::to_string(bad) +
                                           " at position 2"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(ByteTokenizer::decode(Tensor::zeros({2, 2}, DType::I64)), Error);
  EXPECT_THROW(ByteTokenizer::decode(Tensor::zeros({2}, DType::F32)), Error);
  EXPECT_THROW(ByteTokenizer::decode(Tensor()), Error);
}

TEST(TextDataset, SplitsAndDrawsDeterministicResumableBatches) {
  std::vector<int64_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i);
  const TextDataset data(tokens, 0.1);
  EXPECT_EQ(data.size(Split::Train), 900);
  EXPECT_EQ(data.size(Split::Validation), 100);
  EXPECT_EQ(data.tokens(Split::Validation).front(), 900);

  Generator a(42), b(42);
  std::vector<TokenBatch> stream;
  for (int i = 0; i < 5; ++i) stream.push_back(data.batch(Split::Train, 4, 16, a));
  for (int i = 0; i < 5; ++i) {
    const TokenBatch again = data.batch(Split::Train, 4, 16, b);
    const TokenBatch resumed = data.batch_at(Split::Train, 4, 16, 42, i);
    for (int64_t k = 0; k < stream[i].tokens.numel(); ++k) {
      EXPECT_EQ(stream[i].tokens.data<int64_t>()[k], again.tokens.data<int64_t>()[k]);
      EXPECT_EQ(stream[i].tokens.data<int64_t>()[k], resumed.tokens.data<int64_t>()[k]);
    }
  }
  EXPECT_EQ(a.state().offset, 5 * TextDataset::words_per_batch(4));

  const TokenBatch& first = stream[0];
  EXPECT_EQ(first.tokens.shape(), (Shape{4, 17}));
  EXPECT_EQ(first.inputs.shape(), (Shape{4, 16}));
  EXPECT_EQ(first.targets.shape(), (Shape{4, 16}));
  EXPECT_TRUE(first.inputs.is_contiguous() && first.targets.is_contiguous());
  bool differ = false;
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t start = first.tokens.at<int64_t>({r, 0});
    EXPECT_LE(start + 16, 899);  // inside the training split
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(first.inputs.at<int64_t>({r, c}), start + c);  // a window of the corpus
      EXPECT_EQ(first.targets.at<int64_t>({r, c}), start + c + 1);
    }
    differ |= start != stream[1].tokens.at<int64_t>({r, 0});
  }
  EXPECT_TRUE(differ);  // successive batches are new draws
  const TokenBatch other_seed = data.batch_at(Split::Train, 4, 16, 43, 0);
  EXPECT_NE(other_seed.tokens.at<int64_t>({0, 0}), first.tokens.at<int64_t>({0, 0}));

  const TokenBatch val = data.batch(Split::Validation, 3, 8, a);
  for (int64_t r = 0; r < 3; ++r) EXPECT_GE(val.tokens.at<int64_t>({r, 0}), 900);
}

TEST(TextDataset, RejectsWhatCannotWork) {
  EXPECT_THROW(TextDataset({1, 2, 3}, 1.0), Error);
  EXPECT_THROW(TextDataset({1, 2, 3}, -0.1), Error);
  const TextDataset small({1, 2, 3, 4, 5}, 0.0);
  Generator gen(1);
  EXPECT_THROW(small.batch(Split::Train, 2, 5, gen), Error);       // needs 6 tokens
  EXPECT_THROW(small.batch(Split::Validation, 1, 1, gen), Error);  // empty split
  EXPECT_THROW(small.batch(Split::Train, 0, 2, gen), Error);
  EXPECT_THROW(small.batch_at(Split::Train, 1, 2, 1, -1), Error);
  EXPECT_NO_THROW(small.batch(Split::Train, 2, 4, gen));  // exactly one window
  try {
    TextDataset::from_file("/no/such/corpus.txt");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[TextDataset] /no/such/corpus.txt: cannot open"),
              std::string::npos);
  }
  // A directory opens as a stream on Linux and reads as zero bytes: say what it is instead.
  const std::string dir = ::testing::TempDir();
  EXPECT_NE(test_support::error_of([&] { TextDataset::from_file(dir); }).find("is a directory"),
            std::string::npos);
}

TEST(TextDataset, LoadsTheShippedCorpus) {
  const TextDataset data = TextDataset::from_file(kCorpus);
  EXPECT_EQ(data.size(Split::Train) + data.size(Split::Validation), 527742);
  EXPECT_EQ(data.size(Split::Validation), 52774);
  const std::vector<int64_t>& t = data.tokens(Split::Train);
  EXPECT_EQ(ByteTokenizer::decode(std::span<const int64_t>(t.data(), 25)),
            "HAMLET, PRINCE OF DENMARK");
  Generator gen(3);
  const TokenBatch b = data.batch(Split::Train, 8, 256, gen);
  EXPECT_EQ(b.tokens.shape(), (Shape{8, 257}));
}

}  // namespace
}  // namespace mixprec::models
