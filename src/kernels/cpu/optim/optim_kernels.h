#pragma once
// What the optimizer front end (optim.cpp) and its per-level kernels share. Declarations only:
// the ISA translation units include this.
#include <cstdint>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::optim_detail {

// One run of n consecutive elements of every operand (all share one dense layout). The moments
// hold lanes: f32, or f64 on the f64 path. The element index of the first element, split in
// halves: its low half counts lanes inside the hash, its high half is folded into key1 by the
// front end (runs never cross a multiple of 2^32).
struct OptimRun {
  int64_t n = 0;
  void* param = nullptr;  // (n,) param dtype
  DType param_dtype = DType::F32;
  const void* grad = nullptr;  // (n,) grad dtype
  DType grad_dtype = DType::F32;
  float* master = nullptr;  // (n,) f32, or nullptr: read and write the parameter itself
  void* state0 = nullptr;   // (n,) lanes, or nullptr when the rule keeps none
  void* state1 = nullptr;   // (n,) lanes
  bool stochastic = false;  // stochastic rounding into a 16-bit parameter
  uint32_t key0 = 0, key1 = 0;
  uint32_t index_lo = 0;
};

// Hyper-parameters after the per-step arithmetic the front end does once, in f64.
struct AdamConsts {
  double beta1, one_minus_beta1, beta2, one_minus_beta2;
  double step_size;  // lr / (1 - beta1^t)
  double sqrt_bc2;   // sqrt(1 - beta2^t)
  double eps;
  double l2;     // Adam: weight decay added to the gradient; 0 for AdamW
  double decay;  // AdamW: 1 - lr * weight_decay; 1 for Adam
  bool has_decay;
};

struct SgdConsts {
  double lr, momentum, weight_decay;
  bool nesterov, first;
};

struct OptimKernels {
  void (*adam)(const AdamConsts& c, const OptimRun& run);
  void (*sgd)(const SgdConsts& c, const OptimRun& run);
};

// The per-level tables (optim_<level>.cpp); f64 is the width-1 f64 path.
const OptimKernels& optim_scalar();
const OptimKernels& optim_avx2();
const OptimKernels& optim_avx512();
const OptimKernels& optim_f64();

// Sum of squares of n f32, f16 or bf16 values in f64 (the 2-norm of clip_grad_norm), over
// kSquareSumLanes interleaved accumulators (accumulator j takes elements i with i % 8 == j)
// added together in order at the end: each square is exact in f64, so every level that keeps
// this order (scalar in optim.cpp, eight f64 lanes in optim_avx512.cpp) gives the same bits.
constexpr int kSquareSumLanes = 8;
using SquareSumFn = double(const void* data, DType dtype, int64_t n);
double square_sum_avx512(const void* data, DType dtype, int64_t n);

// The scalar random bits every level reproduces: lowbias32 (Chris Wellons' 32-bit integer
// hash, a bijection with good avalanche) applied twice, keyed.
constexpr uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
constexpr uint32_t hash_bits(uint32_t key0, uint32_t key1, uint32_t index_lo) {
  return lowbias32(lowbias32(index_lo + key0) ^ key1);
}

}  // namespace mixprec::kernels::optim_detail
