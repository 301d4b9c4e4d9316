#pragma once
// Which storage precision this machine runs best, and why: the `auto` in --precision auto.
#include <string>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dtype.h"

namespace mixprec {

struct PrecisionChoice {
  DType dtype;
  std::string reason;
};

// bf16 where the CPU has AVX512_BF16 or AMX-BF16 (native bf16 dot products), else f16 storage
// where it has F16C (hardware conversion, f32 compute), else f32.
PrecisionChoice recommended_precision(const CpuFeatures& features = cpu_features());

}  // namespace mixprec
