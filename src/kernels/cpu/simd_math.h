#pragma once
// Vector math written once against the SIMD interface (simd_scalar.h), so every kernel level
// computes the same functions the same way.
//
// Operand order of max/min matters: x86 max/min return the second operand when either is NaN,
// so the constant goes first and a NaN input stays NaN.
//
// exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor
// polynomial for e^r (truncation error < 2.5e-8 relative at |r| = 0.347), then 2^n applied as
// two factors 2^(n/2) 2^(n - n/2), each a normal float, so results in the subnormal range are
// rounded once and kept, and everything below half the smallest subnormal (x < -103.97, -inf
// included) is exactly 0. Input is clamped to [-110, 88.7] (e^88.7 is still finite; the
// overflow of larger x to inf is left to the caller's range).
namespace mixprec::kernels::simd {

template <class S>
typename S::F exp(typename S::F x) {
  using F = typename S::F;
  x = S::min(S::set1(88.7f), S::max(S::set1(-110.0f), x));  // NaN passes through
  const F n = S::round_int(S::mul(x, S::set1(1.44269504088896341f)));
  F r = S::fmadd(n, S::set1(-0.693145751953125f), x);  // ln2 split in two: exact product
  r = S::fmadd(n, S::set1(-1.428606765330187e-06f), r);
  F p = S::set1(1.0f / 720.0f);
  p = S::fmadd(p, r, S::set1(1.0f / 120.0f));
  p = S::fmadd(p, r, S::set1(1.0f / 24.0f));
  p = S::fmadd(p, r, S::set1(1.0f / 6.0f));
  p = S::fmadd(p, r, S::set1(0.5f));
  p = S::fmadd(p, r, S::set1(1.0f));
  p = S::fmadd(p, r, S::set1(1.0f));
  const F half = S::trunc_int(S::mul(n, S::set1(0.5f)));
  return S::scale2(S::scale2(p, half), S::sub(n, half));
}

// 1 / (1 + e^-x); saturates cleanly to 0 and 1.
template <class S>
typename S::F sigmoid(typename S::F x) {
  const auto one = S::set1(1.0f);
  return S::div(one, S::add(one, exp<S>(S::sub(S::zero(), x))));
}

template <class S>
typename S::F silu(typename S::F x) {
  return S::mul(x, sigmoid<S>(x));
}

// GELU, tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// The sigmoid form avoids the cancellation of 1 + tanh(u) for negative u.
template <class S>
typename S::F gelu_tanh(typename S::F x) {
  const auto x3 = S::mul(S::mul(x, x), x);
  const auto u2 = S::mul(S::set1(2.0f * 0.7978845608028654f), S::fmadd(S::set1(0.044715f), x3, x));
  return S::mul(x, sigmoid<S>(u2));
}

// GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)) = x * Phi(x). Phi(x) for x < 0 is computed as
// 0.5 erfc(|x| / sqrt 2) with the Abramowitz-Stegun 7.1.26 form erfc(z) ~ poly(t) e^-z^2,
// t = 1 / (1 + 0.3275911 z): absolute error below 1.5e-7 in Phi, so |error| <= 1.5e-7 |x|.
template <class S>
typename S::F gelu_erf(typename S::F x) {
  using F = typename S::F;
  const F z = S::mul(S::max(x, S::sub(S::zero(), x)), S::set1(0.70710678118654752f));
  const F t = S::div(S::set1(1.0f), S::fmadd(S::set1(0.3275911f), z, S::set1(1.0f)));
  F poly = S::set1(1.061405429f);
  poly = S::fmadd(poly, t, S::set1(-1.453152027f));
  poly = S::fmadd(poly, t, S::set1(1.421413741f));
  poly = S::fmadd(poly, t, S::set1(-0.284496736f));
  poly = S::fmadd(poly, t, S::set1(0.254829592f));
  poly = S::mul(poly, t);
  const F erfc_z = S::mul(poly, exp<S>(S::sub(S::zero(), S::mul(z, z))));
  const F tail = S::mul(S::set1(0.5f), erfc_z);  // Phi(-|x|)
  // Phi(x) = tail for x < 0, 1 - tail for x >= 0; select without branches: blend by sign.
  const F upper = S::sub(S::set1(1.0f), tail);
  return S::mul(x, S::select_negative(x, tail, upper));
}

}  // namespace mixprec::kernels::simd
