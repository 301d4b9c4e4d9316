#pragma once
// Vector math written once against the SIMD interface (simd_scalar.h), so every kernel level
// computes the same functions the same way.
//
// Operand order of max/min matters: x86 max/min return the second operand when either is NaN,
// so the constant goes first and a NaN input stays NaN.
//
// exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor
// polynomial for e^r (truncation error < 2.5e-8 relative at |r| = 0.347), then 2^n applied as
// two factors 2^(n/2) 2^(n - n/2), each a normal float (or at once where the level's scale2
// takes any exponent: AVX-512's vscalefps; p 2^(n/2) is exact, so both round the same product
// once), so results in the subnormal range are rounded once and kept, and everything below half the smallest subnormal (x < -103.97, -inf
// included) is exactly 0. Input is clamped above to 88.7 (e^88.7 is still finite; the
// overflow of larger x to inf is left to the caller's range). Lanes below -104 are not
// computed down to 0 but set to it: an underflow to 0 costs a microcode assist per instruction
// on Intel cores (about 150 cycles), and masked attention scores (-inf) and saturated sigmoids
// put most lanes there (causal attention's softmax ran 3.5x slower per score for it).
namespace mixprec::kernels::simd {

template <class S>
typename S::F exp(typename S::F in) {
  using F = typename S::F;
  const F zero_below = S::set1(-104.0f);  // e^-104 < 2^-150: rounds to 0
  in = S::min(S::set1(88.7f), in);        // NaN passes through
  // Lanes below -104 are computed at 0 (nothing underflows) and set to 0 at the end.
  const F x = S::select_less(in, zero_below, S::zero(), in);
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
  F scaled;
  if constexpr (S::kScale2AnyExponent) {
    scaled = S::scale2(p, n);  // one rounding, the same as the two factors' last one
  } else {
    const F half = S::trunc_int(S::mul(n, S::set1(0.5f)));
    scaled = S::scale2(S::scale2(p, half), S::sub(n, half));
  }
  return S::select_less(in, zero_below, S::zero(), scaled);
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
// The Abramowitz-Stegun 7.1.26 factor for z >= 0: erfc(z) ~ erfc_factor(z) * e^-z^2 (GELU's
// erf form and its derivative share it).
template <class S>
typename S::F erfc_factor(typename S::F z) {
  using F = typename S::F;
  const F t = S::div(S::set1(1.0f), S::fmadd(S::set1(0.3275911f), z, S::set1(1.0f)));
  F poly = S::set1(1.061405429f);
  poly = S::fmadd(poly, t, S::set1(-1.453152027f));
  poly = S::fmadd(poly, t, S::set1(1.421413741f));
  poly = S::fmadd(poly, t, S::set1(-0.284496736f));
  poly = S::fmadd(poly, t, S::set1(0.254829592f));
  return S::mul(poly, t);
}

template <class S>
typename S::F gelu_erf(typename S::F x) {
  using F = typename S::F;
  const F z = S::mul(S::max(x, S::sub(S::zero(), x)), S::set1(0.70710678118654752f));
  const F poly = erfc_factor<S>(z);
  const F erfc_z = S::mul(poly, exp<S>(S::sub(S::zero(), S::mul(z, z))));
  const F tail = S::mul(S::set1(0.5f), erfc_z);  // Phi(-|x|)
  // Phi(x) = tail for x < 0, 1 - tail for x >= 0; select without branches: blend by sign.
  const F upper = S::sub(S::set1(1.0f), tail);
  return S::mul(x, S::select_negative(x, tail, upper));
}

// e^x over the whole f32 range, overflowing to +inf like expf (exp() above stops at e^88.7):
// arguments above 88 are halved (exactly) and the result squared, a few ulp near the top.
template <class S>
typename S::F exp_full(typename S::F x) {
  const auto big = S::set1(88.0f);
  const auto e = exp<S>(S::select_less(big, x, S::mul(x, S::set1(0.5f)), x));
  return S::select_less(big, x, S::mul(e, e), e);
}

// Natural log. x = m 2^e with m in [sqrt(1/2), sqrt(2)), so log x = e ln2 + log m without
// cancellation between the two; log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, by
// its odd series up to s^9 (truncation < 2e-9 relative). m - 1 is exact, so the error is that
// of s: about 1 ulp. log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN.
template <class S>
typename S::F log(typename S::F x) {
  using F = typename S::F;
  F e = S::get_exponent(x);
  F m = S::get_mantissa(x);  // [1, 2)
  const F sqrt2 = S::set1(1.41421356237309505f);
  e = S::select_less(sqrt2, m, S::add(e, S::set1(1.0f)), e);
  m = S::select_less(sqrt2, m, S::mul(m, S::set1(0.5f)), m);
  const F f = S::sub(m, S::set1(1.0f));
  const F s = S::div(f, S::add(f, S::set1(2.0f)));
  const F z = S::mul(s, s);
  F p = S::set1(1.0f / 9.0f);
  p = S::fmadd(p, z, S::set1(1.0f / 7.0f));
  p = S::fmadd(p, z, S::set1(1.0f / 5.0f));
  p = S::fmadd(p, z, S::set1(1.0f / 3.0f));
  p = S::mul(p, z);
  const F two_s = S::add(s, s);
  F r = S::fmadd(two_s, p, two_s);                      // log m
  r = S::fmadd(e, S::set1(1.428606765330187e-06f), r);  // + e ln2, ln2 split in two
  r = S::fmadd(e, S::set1(0.693145751953125f), r);
  r = S::select_less(x, S::set1(0x1p-149f), S::set1(-__builtin_inff()), r);  // +-0
  r = S::select_less(x, S::zero(), S::set1(__builtin_nanf("")), r);
  r = S::select_less(S::set1(3.40282347e38f), x, x, r);  // +inf
  return S::select_nan(x, x, r);
}

// tanh: the Taylor series x - x^3/3 + 2x^5/15 - ... to x^15 below |x| = 0.5 (truncation
// < 1e-8 relative), where 1 - 2 / (e^2|x| + 1) would lose the small result to cancellation;
// above it that form, which saturates to +-1, with the sign of x. Below 2^-12, tanh x rounds
// to x itself (which also keeps the sign of -0).
template <class S>
typename S::F tanh(typename S::F x) {
  using F = typename S::F;
  const F ax = S::abs(x);
  const F z = S::mul(x, x);
  F p = S::set1(-0.0014558343870513183f);
  p = S::fmadd(p, z, S::set1(0.003592128036572481f));
  p = S::fmadd(p, z, S::set1(-0.008863235529902197f));
  p = S::fmadd(p, z, S::set1(0.021869488536155203f));
  p = S::fmadd(p, z, S::set1(-0.05396825396825397f));
  p = S::fmadd(p, z, S::set1(0.13333333333333333f));
  p = S::fmadd(p, z, S::set1(-0.3333333333333333f));
  const F small = S::fmadd(S::mul(p, z), x, x);
  const F one = S::set1(1.0f);
  const F t = S::sub(one, S::div(S::set1(2.0f), S::add(exp<S>(S::add(ax, ax)), one)));
  const F large = S::select_negative(x, S::sub(S::zero(), t), t);
  return S::select_less(ax, S::set1(0x1p-12f), x, S::select_less(ax, S::set1(0.5f), small, large));
}

}  // namespace mixprec::kernels::simd
