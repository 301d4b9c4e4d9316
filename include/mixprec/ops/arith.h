#pragma once
// Differentiable elementwise ops. Binary ops broadcast (NumPy rules) and return the promoted
// dtype of their inputs (f16 with bf16 gives f32, as in PyTorch); math runs in f32 (f64 for
// f64) and rounds once. Gradients come back in each input's dtype, summed over the dims that
// were broadcast.
#include "mixprec/core/tensor.h"

namespace mixprec {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// Scalar operands (s, exponent, lo/hi) are applied in f32 (f64 for an f64 x) and the result is
// rounded once into x's dtype: a scalar is never first rounded to a 16-bit dtype (opmath), and
// it does not promote (a bf16 tensor plus a Python float stays bf16, as in PyTorch). Division
// divides (a / 3 is not a * (1/3)).
Tensor add(const Tensor& a, double s);  // a + s
Tensor sub(const Tensor& a, double s);  // a - s
Tensor sub(double s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, double s);  // a * s
Tensor div(const Tensor& a, double s);  // a / s
Tensor div(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor clamp(const Tensor& x, double lo, double hi);  // gradient passes where lo <= x <= hi

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return sub(s, a); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return div(s, a); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace mixprec
