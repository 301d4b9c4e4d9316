#pragma once
// Derivatives of the activations, written once against the SIMD interface (simd_scalar.h) like
// simd_math.h, for the backward pass: out = grad * f'(x).
//
// Each is formed from e = exp(-|.|) <= 1 so that both sigmoid(v) = 1 / (1 + e^-v) and its
// complement 1 - sigmoid(v) come out with full relative precision on either side of 0 (1 - s
// computed as a difference would cancel to 0 where the true value is e^-v, and tanh'(x) =
// 1 - tanh^2 likewise). The only cancellation left is the one in the functions themselves
// (SiLU's and GELU's derivatives cross zero near x = -1.28 and -0.75).
//   sigmoid'(x) = s (1 - s)
//   tanh'(x)    = 4 s (1 - s) with s = sigmoid(2x)
//   silu'(x)    = s + x s (1 - s)
//   gelu_tanh'  = s + 2 x s (1 - s) u', s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_erf'   = Phi(x) + x phi(x), Phi from the Abramowitz-Stegun erfc form of simd_math.h
//                 (absolute error <= 1.5e-7), phi(x) = e^(-x^2/2) / sqrt(2 pi)
#include "simd_math.h"

namespace mixprec::kernels::simd {

// sigmoid(v) and 1 - sigmoid(v), both to full relative precision.
template <class S>
void sigmoid_pair(typename S::F v, typename S::F& s, typename S::F& sc) {
  using F = typename S::F;
  const F e = exp<S>(S::sub(S::zero(), S::abs(v)));  // e^-|v| in (0, 1]
  const F r = S::div(S::set1(1.0f), S::add(S::set1(1.0f), e));
  const F er = S::mul(e, r);
  s = S::select_negative(v, er, r);
  sc = S::select_negative(v, r, er);
}

template <class S>
typename S::F sigmoid_grad(typename S::F x) {
  typename S::F s, sc;
  sigmoid_pair<S>(x, s, sc);
  return S::mul(s, sc);
}

template <class S>
typename S::F tanh_grad(typename S::F x) {
  typename S::F s, sc;
  sigmoid_pair<S>(S::add(x, x), s, sc);
  return S::mul(S::set1(4.0f), S::mul(s, sc));
}

template <class S>
typename S::F silu_grad(typename S::F x) {
  typename S::F s, sc;
  sigmoid_pair<S>(x, s, sc);
  return S::fmadd(S::mul(x, s), sc, s);
}

template <class S>
typename S::F gelu_tanh_grad(typename S::F x) {
  using F = typename S::F;
  constexpr float kC = 0.7978845608028654f, kA = 0.044715f;
  const F x2 = S::mul(x, x);
  const F u2 = S::mul(S::set1(2.0f * kC), S::fmadd(S::mul(S::set1(kA), x2), x, x));  // 2u
  F s, sc;
  sigmoid_pair<S>(u2, s, sc);
  const F du2 = S::mul(S::set1(2.0f * kC), S::fmadd(S::set1(3.0f * kA), x2, S::set1(1.0f)));
  return S::fmadd(S::mul(S::mul(x, s), sc), du2, s);
}

template <class S>
typename S::F gelu_erf_grad(typename S::F x) {
  using F = typename S::F;
  const F z = S::mul(S::abs(x), S::set1(0.70710678118654752f));
  const F poly = erfc_factor<S>(z);
  const F gauss = exp<S>(S::sub(S::zero(), S::mul(z, z)));    // e^(-x^2 / 2)
  const F tail = S::mul(S::set1(0.5f), S::mul(poly, gauss));  // Phi(-|x|)
  const F cdf = S::select_negative(x, tail, S::sub(S::set1(1.0f), tail));
  const F pdf = S::mul(S::set1(0.39894228040143268f), gauss);
  return S::fmadd(x, pdf, cdf);
}

}  // namespace mixprec::kernels::simd
