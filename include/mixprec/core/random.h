#pragma once
// The seeded random generator: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011), the counter-based generator cuRAND and PyTorch's CUDA backend use.
//
// Why counter-based: word i of the stream is a pure function of (seed, i), so
//   - the same seed gives the same numbers on every run, thread count and ISA level (the
//     generator is plain scalar integer code; the only floating-point math, Box-Muller, is
//     the same scalar double code everywhere);
//   - a tensor fill can hand disjoint counter ranges to threads and still produce exactly the
//     sequence a single thread would;
//   - the whole state is two integers, so saving and restoring it (activation checkpointing
//     replays a forward pass with the same dropout masks) is trivial.
//
// The stream: block b = Philox4x32-10(counter = {b_lo, b_hi, 0, 0}, key = {seed_lo, seed_hi})
// yields four 32-bit words; word i of the stream is word i % 4 of block i / 4. The state is
// (seed, offset) where offset counts words consumed.
//
// A Generator is not thread-safe: give each thread its own (fork()) or hold a lock.
#include <array>
#include <cstdint>
#include <mutex>

namespace mixprec {

// One Philox4x32-10 block: exposed for the known-answer tests and for kernels (dropout) that
// generate random bits in place from a reserved counter range.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // 32-bit words consumed so far
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  // Fixed so that a program that never seeds is still reproducible.
  static constexpr uint64_t kDefaultSeed = 0x6D69787072656331ull;  // "mixprec1"

  explicit Generator(uint64_t seed = kDefaultSeed) : state_{seed, 0} {}

  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  uint64_t seed() const { return state_.seed; }

  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& state) { state_ = state; }

  // An independent generator for another thread or module. Its seed is drawn from this
  // stream (two words) and scrambled, so forks of forks stay distinct.
  Generator fork();

  uint32_t next_u32();
  uint64_t next_u64();  // two words: low word first

  // Uniform in [0, 1): the top 24 bits of one word, so every value is an exact f32.
  float uniform();
  // Uniform in [0, 1) with 53 random bits (two words).
  double uniform_double();

  // Standard normal by Box-Muller in double, rounded to f32. Consumes one whole block (starting
  // at the next block boundary) and returns its first value, so it equals element 0 of
  // randn({1}) drawn from the same state.
  float normal();
  // Both Box-Muller outputs of one block, in double: what randn fills with, two per block.
  std::array<double, 2> normal_pair_double();

  // --- bulk fills (Tensor::rand / randn / uniform use these) ---
  // Moves the offset to the next block boundary, reserves `blocks` whole blocks and returns
  // the index of the first. Fills built on it start block-aligned so that their result does
  // not depend on how many scalar draws preceded them modulo 4.
  uint64_t reserve_blocks(uint64_t blocks);
  std::array<uint32_t, 4> block(uint64_t index) const;

 private:
  GeneratorState state_;
};

// Maps random words to numbers; shared by the scalar methods and the parallel tensor fills so
// the two can never disagree.
namespace random_detail {
inline float u32_to_unit_float(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }
inline double u64_to_unit_double(uint64_t w) { return static_cast<double>(w >> 11) * 0x1p-53; }
// Box-Muller on one block: u1 from words 0-1 (in (0, 1], so log never sees 0), u2 from 2-3.
std::array<double, 2> box_muller(const std::array<uint32_t, 4>& block);
}  // namespace random_detail

// The process-wide generator the Tensor factories use when none is passed. Those factories
// and manual_seed() hold default_generator_mutex() while they use it, so concurrent calls are
// safe (though their order decides who gets which numbers); direct use of default_generator()
// from several threads must take the mutex too.
Generator& default_generator();
std::mutex& default_generator_mutex();
void manual_seed(uint64_t seed);  // reseeds default_generator()

}  // namespace mixprec
