#include "mixprec/core/random.h"

#include <cmath>
#include <numbers>

namespace mixprec {

namespace {

// Philox4x32 constants from the paper: the two round multipliers and the Weyl key increments
// (golden ratio and sqrt(3) - 1, as 32-bit fractions).
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = uint64_t{a} * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// SplitMix64's finaliser: turns a drawn word pair into a well-mixed seed for fork().
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule bumps before every round but the first
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c[0], hi0, lo0);
    mul_hi_lo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

std::array<uint32_t, 4> Generator::block(uint64_t index) const {
  return philox4x32_10(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
      {static_cast<uint32_t>(state_.seed), static_cast<uint32_t>(state_.seed >> 32)});
}

uint32_t Generator::next_u32() {
  // Recomputing the block per word costs ~10 multiplies; bulk users go through
  // reserve_blocks() and use all four words of each block.
  const uint64_t word = state_.offset++;
  return block(word / 4)[word % 4];
}

uint64_t Generator::next_u64() {
  const uint64_t lo = next_u32();
  const uint64_t hi = next_u32();
  return lo | (hi << 32);
}

float Generator::uniform() { return random_detail::u32_to_unit_float(next_u32()); }

double Generator::uniform_double() { return random_detail::u64_to_unit_double(next_u64()); }

uint64_t Generator::reserve_blocks(uint64_t blocks) {
  const uint64_t first = (state_.offset + 3) / 4;
  state_.offset = (first + blocks) * 4;
  return first;
}

std::array<double, 2> Generator::normal_pair_double() {
  return random_detail::box_muller(block(reserve_blocks(1)));
}

float Generator::normal() { return static_cast<float>(normal_pair_double()[0]); }

Generator Generator::fork() { return Generator(mix64(next_u64())); }

namespace random_detail {

std::array<double, 2> box_muller(const std::array<uint32_t, 4>& b) {
  const uint64_t w0 = b[0] | (uint64_t{b[1]} << 32);
  const uint64_t w1 = b[2] | (uint64_t{b[3]} << 32);
  const double u1 = 1.0 - u64_to_unit_double(w0);  // (0, 1]
  const double u2 = u64_to_unit_double(w1);
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

}  // namespace random_detail

Generator& default_generator() {
  static Generator generator;
  return generator;
}

std::mutex& default_generator_mutex() {
  static std::mutex mutex;
  return mutex;
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(default_generator_mutex());
  default_generator().manual_seed(seed);
}

}  // namespace mixprec
