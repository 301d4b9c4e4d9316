#pragma once
// Elementwise kernels: unary maps, binary ops with NumPy broadcasting, clamp, axpby and the
// fused bias + activation.
//
// Dtypes: every tensor is f32, f16, bf16 or f64, in any combination. The math runs in f32 (in
// f64 when any operand, the output included, is f64) and each result is rounded once, into
// out's dtype. Layouts: any strides on every side; dims are walked in the output's memory
// order, so contiguous and channels_last tensors run as flat vectors. `out` may be one of the
// inputs (in place); an input that overlaps `out` in any other way is copied first.
//
// ISA levels compute the same functions with the same polynomials (simd_math.h); results can
// still differ in the last bit between the scalar and vector levels where the compiler fuses
// a multiply and an add into an FMA in the vector code. Pow is evaluated lane by lane with the
// C library's powf/pow, so it is the same on every level.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mixprec/core/tensor.h"
#include "mixprec/kernels/gemm.h"  // Activation, shared with the GEMM epilogue

namespace mixprec::kernels {

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Square,
  Reciprocal,
  Exp,    // overflows to inf above ~88.72, underflows through the subnormals to 0
  Log,    // log(0) = -inf, log(x < 0) = NaN
  Sqrt,   // correctly rounded
  Rsqrt,  // 1 / sqrt(x), two roundings
  Relu,   // NaN stays NaN
  Sigmoid,
  Tanh,
  Silu,      // x * sigmoid(x)
  GeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  GeluErf,   // 0.5 x (1 + erf(x / sqrt 2))
};
inline constexpr std::size_t kNumUnaryOps = 14;
std::string_view unary_op_name(UnaryOp op);  // "neg", "exp", "gelu_tanh", ...

// Max and Min propagate NaN from either side, like torch.maximum / torch.minimum.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Max, Min };
inline constexpr std::size_t kNumBinaryOps = 7;
std::string_view binary_op_name(BinaryOp op);  // "add", "sub", ...

// out = op(x); out has x's shape.
void unary(UnaryOp op, const Tensor& x, const Tensor& out);

// out = grad * op'(x), the backward of an activation: op is Sigmoid, Tanh, Silu, GeluTanh or
// GeluErf (anything else throws). x, grad and out have one shape; the derivative is evaluated
// in f32 (f64 when any operand is f64) and the product rounded once into out's dtype.
bool has_unary_backward(UnaryOp op);
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out);

// out = op(a, b) with a and b broadcast to out's shape, which must be broadcast_shapes(a, b).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);

// out = min(max(x, lo), hi): lo > hi gives hi everywhere (as PyTorch); NaN stays NaN. Either
// bound may be infinite; a NaN bound is an error.
void clamp(const Tensor& x, double lo, double hi, const Tensor& out);

// out = alpha * x + beta * y, broadcasting like binary(): the axpy of optimizers and residual
// blends, in one pass and one rounding.
void axpby(double alpha, const Tensor& x, double beta, const Tensor& y, const Tensor& out);

// out = act(x + bias), bias [C] over the channel dim of x: dim 1 when x has 4 or more dims
// (NCHW whatever the layout, NCDHW), else the last dim ([N, C], [B, T, C]).
void bias_activation(const Tensor& x, const Tensor& bias, Activation act, const Tensor& out);

}  // namespace mixprec::kernels
