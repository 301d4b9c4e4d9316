#pragma once
// What the elementwise front end (elementwise.cpp) and its per-level kernels share.
// Declarations only, no inline code: the ISA translation units include this.
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "mixprec/kernels/elementwise.h"

namespace mixprec::kernels::elementwise_detail {

inline constexpr int kMaxOperands = 3;

// One run of n elements of an elementwise loop. Operand 0 is the output, 1 and 2 the inputs
// (as many as the op reads). Strides count elements of each operand's own dtype; an input's
// stride may be 0 (broadcast).
struct Run {
  int64_t n;
  char* data[kMaxOperands];
  int64_t stride[kMaxOperands];
  DType dtype[kMaxOperands];
};

enum class MapKind : uint8_t {
  Unary,           // out = unary(in1)
  Binary,          // out = binary(in1, in2)
  Clamp,           // out = min(max(in1, p0), p1)
  Axpby,           // out = p0 * in1 + p1 * in2
  BiasActivation,  // out = activation(in1 + in2)
  UnaryGrad,       // out = in2 * unary'(in1): the backward of an activation (x, grad)
};

struct MapOp {
  MapKind kind = MapKind::Unary;
  UnaryOp unary = UnaryOp::Neg;
  BinaryOp binary = BinaryOp::Add;
  Activation activation = Activation::None;
  double p0 = 0.0, p1 = 0.0;
};

struct ElementwiseKernels {
  void (*run)(const MapOp& op, const Run& run);
};

// The per-level tables (elementwise_<level>.cpp); f64 is the width-1 f64 path.
const ElementwiseKernels& elementwise_scalar();
const ElementwiseKernels& elementwise_avx2();
const ElementwiseKernels& elementwise_avx512();
const ElementwiseKernels& elementwise_f64();

}  // namespace mixprec::kernels::elementwise_detail
