#pragma once
// What the norm front end (norm.cpp) and its per-level kernels share. Declarations only, no
// inline code: the ISA translation units include this.
//
// "Lane arrays" are small per-channel arrays the front end prepares in the kernels' lane
// type: f32 for the f32-compute levels, f64 for the f64 path.
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "mixprec/kernels/gemm.h"  // Activation

namespace mixprec::kernels::norm_detail {

// What every norm reads and writes; the plans below say the layouts.
struct NormOperands {
  const void* x;
  DType x_dtype;
  void* out;  // the layout of x; may be x
  DType out_dtype;
  const void* weight;  // or null
  DType weight_dtype;
  const void* bias;  // or null
  DType bias_dtype;
};

// x and out [rows, len] contiguous; weight and bias [len] (bias always null for RMSNorm).
struct LayerNormPlan : NormOperands {
  int64_t rows, len;
  double eps;
  bool rms;      // RMSNorm: statistics of x^2, no centring
  double* mean;  // [rows] or null: mean of x (LayerNorm) or of x^2 (RMSNorm)
  double* rstd;  // [rows] or null
};

// x and out [N, C, HW] contiguous, or [N, HW, C] when channels_last; weight and bias [C].
struct GroupNormPlan : NormOperands {
  int64_t n, c, hw, groups;
  double eps;
  Activation activation;
  double* mean;  // [N, G] or null
  double* rstd;  // [N, G] or null
};

struct NormKernels {
  // LayerNorm / RMSNorm of rows [lo, hi).
  void (*layer_norm)(const LayerNormPlan& plan, int64_t lo, int64_t hi);
  // NCHW GroupNorm of units [lo, hi), unit = n * groups + g: statistics of the group's
  // contiguous block, then its channels normalised.
  void (*group_norm)(const GroupNormPlan& plan, int64_t lo, int64_t hi);
  // Channels_last, in phases over chunks of HW rows of one sample n:
  //   sums[c] = sum over rows [r0, r1) of x[n, r, c], or of (x[n, r, c] - center[c])^2 when
  //   center (a [C] lane array) is given;
  //   apply: out[n, r, c] = act((x[n, r, c] - center[c]) * scale[c] + shift[c]) for rows
  //   [r0, r1), center, scale and shift [C] lane arrays.
  void (*channel_sums)(const GroupNormPlan& plan, int64_t n, int64_t r0, int64_t r1,
                       const void* center, double* sums);
  void (*channels_last_apply)(const GroupNormPlan& plan, int64_t n, int64_t r0, int64_t r1,
                              const void* center, const void* scale, const void* shift);
};

const NormKernels& norm_scalar();
const NormKernels& norm_avx2();
const NormKernels& norm_avx512();
const NormKernels& norm_f64();

}  // namespace mixprec::kernels::norm_detail
