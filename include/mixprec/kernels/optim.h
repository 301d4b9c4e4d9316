#pragma once
// Fused optimizer updates: one pass per parameter reads the gradient, the master weight (or the
// parameter), the optimizer's moments, and writes the moments, the master weight and the
// parameter rounded to its own dtype. One pass matters: an update is memory-bound, and a
// 16-bit parameter with an f32 master weight and two f32 moments already moves 14 bytes per
// element each way.
//
// Operands (all the same shape and the same dense strides; the gradient is staged into the
// parameter's layout first if it differs):
//   param   f32, f16, bf16 or f64: what the model computes with; written last
//   grad    f32, f16, bf16 or f64 (for 16-bit parameters usually the f32 gradient that
//           GradScaler::unscale leaves, so nothing underflowed on the way)
//   master  f32 copy of a 16-bit parameter, or undefined: then the update starts from the
//           parameter's own (rounded) value and lands back in it, which is how a bf16
//           parameter loses every update smaller than half its ulp
//   state   the moments: f32 (f64 for f64 parameters)
//
// Numerics: the update runs in f32 lanes (f64 for f64 parameters) with one fixed sequence of
// operations (explicit fused multiply-adds, correctly rounded division and square root), so
// every ISA level gives the same bits as the scalar reference; the kernel tests check that.
//
// Rounding into a 16-bit parameter: round to nearest even, or stochastic rounding
// (`Rounding::Stochastic`): the value rounds up to the next 16-bit number away from zero with
// probability equal to its distance from the one below, measured in that ulp, so the rounded
// parameter is unbiased and tiny updates survive in expectation (llm.c's bf16 training). The
// random bits are a counter-based hash of (seed, step, param index, element index), so the
// result is identical on every ISA level and thread count and after a checkpoint resume.
//   bf16: 16 random bits are added to the low half of the f32 bit pattern, then truncated
//         (exact: the f32 spacing within one bf16 ulp is uniform).
//   f16:  with ulp = 2^(max(e, -14) - 10) for |x| in [2^e, 2^(e+1)), q = |x| / ulp, the
//         result is (floor(q) + [u < q - floor(q)]) * ulp with u uniform on 24 bits; the bias
//         is below 2^-24 ulp.
// Inf and NaN pass through as under round to nearest even; zeros keep their sign.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

enum class Rounding : uint8_t { NearestEven, Stochastic };

// Where the random bits of stochastic rounding come from for one parameter at one step.
struct StochasticStream {
  uint64_t seed = 0;
  uint64_t step = 0;         // the parameter's step count (1 on its first update)
  uint64_t param_index = 0;  // position of the parameter in its optimizer
};

// The operands of one parameter's update.
// (Default initialisers everywhere keep designated initialisers -Wextra clean.)
struct OptimOperands {
  Tensor param = {};
  Tensor grad = {};
  Tensor master = {};  // undefined: update the parameter directly
  Tensor state0 = {};  // Adam: exp_avg; SGD: momentum buffer (undefined without momentum)
  Tensor state1 = {};  // Adam: exp_avg_sq
  Rounding rounding = Rounding::NearestEven;
  StochasticStream stream = {};
};

// PyTorch's Adam / AdamW for one parameter at step `step` (>= 1):
//   g = grad (+ weight_decay * p for Adam's L2 form)
//   p = p * (1 - lr * weight_decay)                  (AdamW's decoupled form)
//   m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct AdamStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = true;  // AdamW
  int64_t step = 1;
};
void adam_step(const AdamStep& hp, const OptimOperands& ops);

// PyTorch's SGD for one parameter:
//   d = g + weight_decay * p
//   b = first ? d : momentum * b + d;   d = nesterov ? d + momentum * b : b   (momentum > 0)
//   p = p - lr * d
struct SgdStep {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first = true;  // the momentum buffer is initialised from d
};
void sgd_step(const SgdStep& hp, const OptimOperands& ops);

// The ISA-independent reference: the random bits and the rounding of one f32 value, as every
// level computes them (tests compare against these).
uint32_t stochastic_bits(const StochasticStream& stream, uint64_t element);
float round_stochastic(float x, DType dtype, uint32_t bits);  // exactly representable in dtype

// Gradient norms for clipping: sum over elements of |g|^p, or the largest |g| when p is inf
// (NaN if any element is NaN). Accumulated in f64 in fixed blocks combined in a fixed order,
// so the result does not depend on the thread count or the ISA level.
double norm_pow_sum(const Tensor& g, double p);

}  // namespace mixprec::kernels
