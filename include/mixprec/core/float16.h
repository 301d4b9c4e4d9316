#pragma once
// The two 16-bit floating types, as strong types over their bits, and their scalar conversion
// rules. These functions ARE the numerics contract for conversions (DESIGN.md section 1): every
// SIMD conversion kernel must match them bit for bit.
//
//   Half     IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits. Max 65504.
//   BFloat16 the top half of an f32: 1 sign, 8 exponent, 7 mantissa bits. Max ~3.39e38.
//
// Rules, in both directions: round to nearest, ties to even; overflow gives +-inf; subnormals
// are kept (never flushed); a NaN stays a NaN and comes out *quiet*, keeping the top bits of
// its payload (what F16C's vcvtps2ph/vcvtph2ps and AVX512_BF16's vcvtneps2bf16 do).
#include <bit>
#include <cstdint>

namespace mixprec {

namespace fp16_bits {

constexpr uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
constexpr float f32_from(uint32_t u) { return std::bit_cast<float>(u); }

constexpr uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest even; a carry out of the
  // mantissa bumps the exponent, and out of the largest finite value gives inf.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

constexpr float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t{b} << 16;
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x00400000u;  // quiet the NaN
  return f32_from(u);
}

constexpr uint16_t f32_to_f16(float f) {
  const uint32_t bits = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t u = bits & 0x7FFFFFFFu;
  if (u > 0x7F800000u)  // NaN: quiet, top 10 payload bits kept
    return static_cast<uint16_t>(sign | 0x7E00u | ((u >> 13) & 0x03FFu));
  if (u >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 and inf
  if (u >= 0x38800000u) {  // normal in f16 (>= 2^-14): rebias the exponent, round 13 bits away
    u -= 0x38000000u;      // (127 - 15) << 23
    u += 0x0FFFu + ((u >> 13) & 1u);
    return static_cast<uint16_t>(sign | (u >> 13));
  }
  // Subnormal in f16: the result is x / 2^-24 rounded to an integer, x = mant * 2^(exp - 150).
  const uint32_t exp = u >> 23;
  if (exp < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie to even 0)
  const uint32_t mant = (u & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 126 - exp;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

constexpr float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x03FFu;
  if (exp == 0x1F) return f32_from(sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return f32_from(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace fp16_bits

// Shared shape of Half and BFloat16; ToBits and FromBits are the type's two conversions.
template <typename Derived, uint16_t (*ToBits)(float), float (*FromBits)(uint16_t)>
struct Float16Base {
  uint16_t bits = 0;

  constexpr Float16Base() = default;
  constexpr explicit Float16Base(float f) : bits(ToBits(f)) {}
  static constexpr Derived from_bits(uint16_t b) {
    Derived d;
    d.bits = b;
    return d;
  }
  constexpr operator float() const { return FromBits(bits); }

  // Arithmetic goes through f32 and rounds once per result, as on hardware without native
  // 16-bit arithmetic.
  friend constexpr Derived operator+(Derived a, Derived b) { return Derived(float(a) + float(b)); }
  friend constexpr Derived operator-(Derived a, Derived b) { return Derived(float(a) - float(b)); }
  friend constexpr Derived operator*(Derived a, Derived b) { return Derived(float(a) * float(b)); }
  friend constexpr Derived operator/(Derived a, Derived b) { return Derived(float(a) / float(b)); }
  friend constexpr Derived operator-(Derived a) { return from_bits(a.bits ^ 0x8000u); }
  constexpr Derived& operator+=(Derived o) { return self() = self() + o; }
  constexpr Derived& operator-=(Derived o) { return self() = self() - o; }
  constexpr Derived& operator*=(Derived o) { return self() = self() * o; }
  constexpr Derived& operator/=(Derived o) { return self() = self() / o; }

 private:
  constexpr Derived& self() { return static_cast<Derived&>(*this); }
};

struct Half : Float16Base<Half, fp16_bits::f32_to_f16, fp16_bits::f16_to_f32> {
  using Float16Base::Float16Base;
  static constexpr Half max() { return from_bits(0x7BFF); }         // 65504
  static constexpr Half lowest() { return from_bits(0xFBFF); }      // -65504
  static constexpr Half min_normal() { return from_bits(0x0400); }  // 2^-14
  static constexpr Half denorm_min() { return from_bits(0x0001); }  // 2^-24
  static constexpr Half epsilon() { return from_bits(0x1400); }     // 2^-10
  static constexpr Half infinity() { return from_bits(0x7C00); }
  static constexpr Half quiet_nan() { return from_bits(0x7E00); }
};

struct BFloat16 : Float16Base<BFloat16, fp16_bits::f32_to_bf16, fp16_bits::bf16_to_f32> {
  using Float16Base::Float16Base;
  static constexpr BFloat16 max() { return from_bits(0x7F7F); }  // ~3.39e38
  static constexpr BFloat16 lowest() { return from_bits(0xFF7F); }
  static constexpr BFloat16 min_normal() { return from_bits(0x0080); }  // 2^-126
  static constexpr BFloat16 denorm_min() { return from_bits(0x0001); }  // 2^-133
  static constexpr BFloat16 epsilon() { return from_bits(0x3C00); }     // 2^-7
  static constexpr BFloat16 infinity() { return from_bits(0x7F80); }
  static constexpr BFloat16 quiet_nan() { return from_bits(0x7FC0); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
static_assert(Half(65504.0f).bits == 0x7BFF && Half(65520.0f).bits == 0x7C00);
static_assert(BFloat16(1.0f).bits == 0x3F80 && float(BFloat16::from_bits(0x3F80)) == 1.0f);

}  // namespace mixprec
