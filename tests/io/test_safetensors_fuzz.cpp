// Seeded mutation fuzzing of the safetensors reader, deterministic and bounded so it runs in
// every `make test` (and under ASan in `make test-asan`, where an out-of-bounds read fails it).
// Each mutant is copied into a buffer of exactly its size, so a read one byte past the end is
// a heap overflow ASan reports. Every mutant must either open, with every tensor then
// readable inside the image, or throw mixprec::Error; anything else fails the test.
// tests/fuzz/ has the coverage-guided libFuzzer target for longer runs.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "io_test_util.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::io {
namespace {

using test::Bytes;

// A valid file exercising every field: metadata, all mixprec dtypes, a dtype mixprec lacks,
// a 0-d and an empty tensor, header order unlike data order, escapes in names.
Bytes seed_image() {
  const std::string header = R"({"__metadata__":{"format":"pt","note":"caf\u00e9"},)"
                             R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]},)"
                             R"("d":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                             R"("h\"q":{"dtype":"F16","shape":[2,2],"data_offsets":[32,40]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[40,46]},)"
                             R"("e":{"dtype":"BF16","shape":[0,5],"data_offsets":[46,46]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[46,54]},)"
                             R"("j":{"dtype":"I32","shape":[1,1],"data_offsets":[54,58]},)"
                             R"("u":{"dtype":"U8","shape":[2],"data_offsets":[58,60]},)"
                             R"("m":{"dtype":"BOOL","shape":[2],"data_offsets":[60,62]},)"
                             R"("q":{"dtype":"I8","shape":[2],"data_offsets":[62,64]}})";
  Bytes data(64);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::byte(static_cast<uint8_t>(i * 37));
  data[60] = std::byte{1};  // valid BOOLs, so the seed itself reads cleanly
  data[61] = std::byte{0};
  return test::make_image(header, data);
}

// Tokens whose substitution reaches deeper checks than random bytes do.
const char* const kTokens[] = {"0",
                               "1",
                               "-1",
                               "2.5",
                               "1e3",
                               "-0",
                               "18446744073709551615",
                               "18446744073709551616",
                               "9223372036854775807",
                               "9223372036854775808",
                               "4294967296",
                               "[]",
                               "[0]",
                               "[1,2,3]",
                               "{}",
                               "null",
                               "true",
                               "\"F32\"",
                               "\"BF16\"",
                               "\"BOOL\"",
                               "\"I8\"",
                               "\"F17\"",
                               "\"dtype\"",
                               "\"shape\"",
                               "\"data_offsets\"",
                               "\"__metadata__\"",
                               "\"\\ud800\"",
                               "\"\\u00e9\"",
                               "\xC3",
                               "\xFF",
                               ",",
                               ":",
                               "\"",
                               "{",
                               "}",
                               "[",
                               "]",
                               " "};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  Bytes mutate(Bytes image) {
    // Mostly one mutation: stacking them rarely leaves anything the parser would accept.
    const int rounds = 1 + (pick(4) == 0 ? static_cast<int>(pick(3)) : 0);
    for (int r = 0; r < rounds; ++r) mutate_once(image);
    return image;
  }

 private:
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }

  void mutate_once(Bytes& b) {
    switch (pick(11)) {
      case 0:  // flip one bit
        if (!b.empty()) b[pick(b.size())] ^= std::byte(static_cast<uint8_t>(1u << pick(8)));
        break;
      case 1:  // set a byte
        if (!b.empty()) b[pick(b.size())] = std::byte(static_cast<uint8_t>(rng_()));
        break;
      case 2:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 3: {  // delete a run
        if (b.empty()) break;
        const std::size_t at = pick(b.size());
        const std::size_t n = std::min(b.size() - at, 1 + pick(8));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 4: {  // insert random bytes
        const std::size_t at = pick(b.size() + 1);
        const std::size_t n = 1 + pick(8);
        Bytes extra(n);
        for (std::byte& x : extra) x = std::byte(static_cast<uint8_t>(rng_()));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), extra.begin(), extra.end());
        break;
      }
      case 5:
      case 6: {  // replace a header span with a token, then fix the length field half the time
        if (b.size() <= 8) break;
        uint64_t n = 0;
        std::memcpy(&n, b.data(), 8);
        const std::size_t header_end =
            std::min<uint64_t>(b.size(), 8 + std::min<uint64_t>(n, b.size()));
        if (header_end <= 8) break;
        const std::size_t at = 8 + pick(header_end - 8);
        const std::size_t len = std::min(header_end - at, pick(6));
        const std::string token = kTokens[pick(std::size(kTokens))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at),
                 reinterpret_cast<const std::byte*>(token.data()),
                 reinterpret_cast<const std::byte*>(token.data() + token.size()));
        if (pick(2) == 0) {
          const uint64_t fixed = n + token.size() - len;
          std::memcpy(b.data(), &fixed, 8);
        }
        break;
      }
      case 7: {  // rewrite the length field
        if (b.size() < 8) break;
        uint64_t n = 0;
        std::memcpy(&n, b.data(), 8);
        const uint64_t choices[] = {n + 1,
                                    n - 1,
                                    0,
                                    1,
                                    b.size() - 8,
                                    b.size() - 7,
                                    UINT64_MAX,
                                    kSafetensorsMaxHeaderBytes,
                                    kSafetensorsMaxHeaderBytes + 1,
                                    static_cast<uint64_t>(rng_())};
        n = choices[pick(std::size(choices))];
        std::memcpy(b.data(), &n, 8);
        break;
      }
      case 8: {  // duplicate a chunk (repeats entries and keys)
        if (b.size() < 2) break;
        const std::size_t at = pick(b.size());
        const std::size_t n = std::min(b.size() - at, 1 + pick(64));
        const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(at),
                          b.begin() + static_cast<std::ptrdiff_t>(at + n));
        const std::size_t to = pick(b.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(to), chunk.begin(), chunk.end());
        break;
      }
      default: {  // change a data byte: the file stays valid, the values (and BOOLs) change
        uint64_t n = 0;
        if (b.size() < 8) break;
        std::memcpy(&n, b.data(), 8);
        if (n >= b.size() - 8) break;
        b[8 + n + pick(b.size() - 8 - n)] = std::byte(static_cast<uint8_t>(rng_()));
        break;
      }
    }
  }

  std::mt19937_64 rng_;  // fully specified by the standard: the same mutants everywhere
};

// Opens the image and reads everything a user could; returns whether it opened.
bool exercise(const Bytes& image) {
  // Exactly-sized heap copy: ASan flags any read past the last byte.
  const std::unique_ptr<std::byte[]> exact(new std::byte[image.size() + (image.empty() ? 1 : 0)]);
  if (!image.empty()) std::memcpy(exact.get(), image.data(), image.size());
  const std::span<const std::byte> view(exact.get(), image.size());
  try {
    const SafetensorsFile f = SafetensorsFile::from_bytes(view, "mutant");
    const SafetensorsHeader& h = f.header();
    EXPECT_EQ(h.data_offset + h.data_bytes, image.size());
    uint64_t covered = 0;
    for (const TensorInfo& t : f.tensors()) {
      EXPECT_LE(t.begin, t.end);
      EXPECT_LE(t.end, h.data_bytes);
      EXPECT_EQ(t.nbytes(), static_cast<uint64_t>(t.numel) * t.element_size);
      covered += t.nbytes();
      const std::span<const std::byte> raw = f.data(t);
      EXPECT_GE(raw.data(), view.data());
      EXPECT_LE(raw.data() + raw.size(), view.data() + view.size());
      if (t.dtype) {
        try {
          const Tensor x = f.tensor(t);
          EXPECT_EQ(x.shape(), t.shape);
        } catch (const Error& e) {
          // Only a BOOL byte outside {0, 1} may refuse a tensor of a supported dtype.
          EXPECT_EQ(*t.dtype, DType::Bool) << e.what();
        }
      }
    }
    EXPECT_EQ(covered, h.data_bytes);  // the tiling rule
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[safetensors] mutant: "), std::string::npos) << e.what();
    return false;
  }
}

TEST(SafetensorsFuzz, SeedOpens) { EXPECT_TRUE(exercise(seed_image())); }

TEST(SafetensorsFuzz, SeededMutations) {
  constexpr int kMutations = 20000;
  const Bytes seed = seed_image();
  Mutator mutator(0x5afe7e9502ull);
  int opened = 0;
  for (int i = 0; i < kMutations; ++i) {
    const Bytes mutant = mutator.mutate(seed);
    opened += exercise(mutant);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing mutant: #" << i << " (" << mutant.size() << " bytes)";
      return;
    }
  }
  // Both outcomes must be common, or the mutations are not reaching the checks.
  EXPECT_GT(opened, kMutations / 100);
  EXPECT_LT(opened, kMutations / 2);
  RecordProperty("opened", opened);
}

}  // namespace
}  // namespace mixprec::io
