#pragma once
// An independent, exact reference for the 16-bit float formats, written without the production
// code (core/float16.h) so that tests compare two implementations, not one with itself.
//
// Method: decode every finite non-negative 16-bit pattern to its exact value as a double (by
// the textbook formula, with ldexp); the values are increasing with the pattern. To round x,
// find the last value <= x by binary search, and compare x with the exact midpoint of it and
// the next value (16-bit values and their midpoints have at most 12 significant bits, so they
// are exact in double); a tie goes to the even pattern. The overflow threshold is the largest
// finite value plus half its ulp: x at or above it is infinity (a tie there goes to the "even"
// value 2^(emax+1), which does not exist, so to infinity - IEEE 754 section 4.3.1).
//
// NaN rule (the contract, DESIGN.md section 1, matching F16C and AVX512_BF16): the result is a
// quiet NaN with the source's sign and the top bits of its payload.
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mixprec::test_support {

class Format16 {
 public:
  static const Format16& f16() {
    static const Format16 format(10, 5);
    return format;
  }
  static const Format16& bf16() {
    static const Format16 format(7, 8);
    return format;
  }

  int mantissa_bits() const { return mantissa_bits_; }
  uint16_t sign_bit() const { return 0x8000u; }
  uint16_t infinity_bits() const { return inf_bits_; }
  uint16_t max_finite_bits() const { return static_cast<uint16_t>(inf_bits_ - 1u); }
  uint16_t quiet_bit() const { return static_cast<uint16_t>(1u << (mantissa_bits_ - 1)); }
  double overflow_threshold() const { return overflow_; }

  bool is_nan(uint16_t bits) const { return (bits & 0x7FFFu) > inf_bits_; }
  // The exact value of a finite non-negative pattern (bits <= max_finite_bits()).
  double magnitude(uint16_t bits) const { return values_[bits]; }
  // The exact value of any non-NaN pattern, signed (-0 included).
  double value(uint16_t bits) const {
    const uint16_t m = bits & 0x7FFFu;
    const double v = m == inf_bits_ ? INFINITY : values_[m];
    return (bits & 0x8000u) ? -v : v;
  }
  // Midpoint between the finite non-negative pattern `bits` and the next one (exact).
  double midpoint_above(uint16_t bits) const {
    return bits == max_finite_bits() ? overflow_ : (values_[bits] + values_[bits + 1u]) / 2;
  }

  // Round-to-nearest-even of an exact value given as any floating type (float, double, long
  // double). x must not be NaN.
  template <typename X>
  uint16_t round(X x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
    const X a = std::fabs(x);
    if (a >= static_cast<X>(overflow_)) return static_cast<uint16_t>(sign | inf_bits_);
    // Largest k with values_[k] <= a: binary search on [lo, hi).
    uint32_t lo = 0, hi = static_cast<uint32_t>(inf_bits_);  // values_[inf_bits_ - 1] is max
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (static_cast<X>(values_[mid]) <= a)
        lo = mid;
      else
        hi = mid;
    }
    uint32_t k = lo;
    if (static_cast<X>(values_[k]) != a && k != max_finite_bits()) {
      const X m = static_cast<X>((values_[k] + values_[k + 1]) / 2);
      if (a > m || (a == m && (k & 1u))) ++k;
    }
    return static_cast<uint16_t>(sign | k);
  }

  // f32 -> 16 bits, NaN included.
  uint16_t from_f32(float f) const {
    if (std::isnan(f)) {
      const uint32_t u = std::bit_cast<uint32_t>(f);
      return nan_bits(u >> 31, (u & 0x007FFFFFu) >> (23 - mantissa_bits_));
    }
    return round(f);
  }
  // f64 -> 16 bits, NaN included: the top payload bits of the 52-bit payload.
  uint16_t from_f64(double d) const {
    if (std::isnan(d)) {
      const uint64_t u = std::bit_cast<uint64_t>(d);
      return nan_bits(static_cast<uint32_t>(u >> 63),
                      static_cast<uint32_t>((u & 0x000FFFFFFFFFFFFFull) >> (52 - mantissa_bits_)));
    }
    return round(d);
  }
  // Integers are exact in long double (64-bit significand).
  uint16_t from_i64(int64_t v) const { return round(static_cast<long double>(v)); }

  // 16 bits -> f32 bits: exact for numbers, quiet NaN with the payload moved up.
  uint32_t to_f32_bits(uint16_t bits) const {
    const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
    if (is_nan(bits)) {
      const uint32_t payload = bits & ((1u << mantissa_bits_) - 1u);
      return sign | 0x7F800000u | 0x00400000u | (payload << (23 - mantissa_bits_));
    }
    return std::bit_cast<uint32_t>(static_cast<float>(value(bits)));  // exact, sign included
  }

 private:
  Format16(int mantissa_bits, int exponent_bits)
      : mantissa_bits_(mantissa_bits),
        inf_bits_(static_cast<uint16_t>(((1u << exponent_bits) - 1u) << mantissa_bits)) {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    values_.resize(inf_bits_);
    for (uint32_t bits = 0; bits < inf_bits_; ++bits) {
      const int exponent = static_cast<int>(bits >> mantissa_bits);
      const double fraction = static_cast<double>(bits & ((1u << mantissa_bits) - 1u));
      values_[bits] = exponent == 0 ? std::ldexp(fraction, 1 - bias - mantissa_bits)
                                    : std::ldexp(fraction + std::ldexp(1.0, mantissa_bits),
                                                 exponent - bias - mantissa_bits);
    }
    const double max = values_[inf_bits_ - 1u];
    overflow_ = max + (max - values_[inf_bits_ - 2u]) / 2;
  }

  uint16_t nan_bits(uint32_t sign, uint32_t top_payload) const {
    return static_cast<uint16_t>((sign << 15) | inf_bits_ | quiet_bit() | top_payload);
  }

  int mantissa_bits_;
  uint16_t inf_bits_;
  double overflow_ = 0;
  std::vector<double> values_;  // (inf_bits_,) exact value of each finite non-negative pattern
};

}  // namespace mixprec::test_support
