#pragma once
// What the norm backward front end (norm_backward.cpp) and its per-level kernels share.
// Declarations only: the ISA translation units include this.
//
// Lane arrays are in the kernels' lane type: f32 for the f32 levels, f64 for the f64 path.
#include <cstdint>

#include "mixprec/core/dtype.h"
#include "mixprec/kernels/gemm.h"  // Activation

namespace mixprec::kernels::norm_backward_detail {

// What every norm backward reads and writes; the plans below say the layouts.
struct BackwardOperands {
  const void* x;
  DType x_dtype;
  const void* grad;
  DType grad_dtype;
  void* dx;  // or null
  DType dx_dtype;
};

// Rows of a LayerNorm / RMSNorm: x, grad, dx [rows, len] contiguous.
struct RowsPlan : BackwardOperands {
  const void* weight;  // [len] lane array or null
  const void* mean;    // [rows] lane array (unused for RMSNorm)
  const void* rstd;    // [rows] lane array
  int64_t rows, len;
  bool rms;
};

// GroupNorm: x, grad, dx [N, C, HW] (NCHW) or [N, HW, C] (channels_last).
struct GroupPlan : BackwardOperands {
  const void* weight;  // [C] lane array or null
  const void* bias;    // [C] lane array or null
  const void* mean;    // [N, G] lane array
  const void* rstd;    // [N, G] lane array
  int64_t n, c, hw, groups;
  Activation activation;  // None or SiLU
};

struct NormBackwardKernels {
  // Rows [lo, hi): dx of each row; adds sum g' xhat and sum g' of the rows into dw_part and
  // db_part ([len] lane arrays, zeroed by the caller; null when not wanted).
  void (*rows)(const RowsPlan& p, int64_t lo, int64_t hi, void* dw_part, void* db_part);
  // NCHW units [lo, hi), unit = n * G + g: dx of the group and, per channel c of it,
  // dw_part[n * C + c] = sum g' xhat, db_part[n * C + c] = sum g' (lane arrays [N, C]).
  void (*groups_nchw)(const GroupPlan& p, int64_t lo, int64_t hi, void* dw_part, void* db_part);
  // Channels_last sample n: the same, with `scratch` holding HW * C lanes of g'.
  void (*sample_nhwc)(const GroupPlan& p, int64_t n, void* scratch, void* dw_part, void* db_part);
};

const NormBackwardKernels& norm_backward_scalar();
const NormBackwardKernels& norm_backward_avx2();
const NormBackwardKernels& norm_backward_avx512();
const NormBackwardKernels& norm_backward_f64();

}  // namespace mixprec::kernels::norm_backward_detail
