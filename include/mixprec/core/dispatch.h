#pragma once
// How kernels are picked: every switch that steers the choice, in one DispatchConfig.
//
// Each op has an ordered list of kernel candidates, best first (AMX -> vdpbf16ps -> AVX-512 ->
// AVX2 -> scalar reference, as oneDNN's implementation lists); each needs a kernel level and
// says whether it takes a problem (shape, dtypes, layout); the first that takes it runs
// (src/kernels/cpu/isa/candidates.h). The config below is what those lists consult besides the
// problem itself. It is read from the environment once, on first use:
//   MIXPREC_ISA=scalar|avx2|avx512|avx512bf16|amx   the highest level kernels may use
//   MIXPREC_BF16_CONV=auto|dot|widen                  see Bf16ConvCompute
//   MIXPREC_PACK_WEIGHTS=1|0                          see pack_inference_weights
// A bad value throws Error naming the valid ones. The choice is a pure function of the
// config, the CPU (cpuid) and the problem: never of timing, so results do not change from run
// to run. It lives in core because the kernel level does (cpu_features.h); every layer may read
// it.
#include <cstdint>
#include <string_view>

#include "mixprec/core/cpu_features.h"

namespace mixprec {

// How a bf16 x bf16 convolution computes when AMX does not take it (or is not allowed to).
//   Auto:       AMX tiles at the amx level where the channels per group are a multiple of 32;
//               other shapes vdpbf16ps, except on CPUs with AMX (whose vdpbf16ps issues at half
//               rate), where they widen. Decided from the level and cpuid, never by timing.
//   DotProduct: vdpbf16ps (avx512bf16 level, even channels per group); never AMX.
//   WidenToF32: bf16 widened to f32 once per call for the f32 kernels; never AMX.
// They round differently: vdpbf16ps and AMX flush subnormal inputs and products, widening keeps
// them (docs/NUMERICS.md, "bf16 convolution").
enum class Bf16ConvCompute : uint8_t { Auto, DotProduct, WidenToF32 };

struct DispatchConfig {
  IsaLevel level = IsaLevel::Scalar;  // candidates above it are skipped
  Bf16ConvCompute bf16_conv = Bf16ConvCompute::Auto;
  // Whether nn::Linear and nn::Conv2d keep their weights packed for inference. Off trades the
  // per-call packing back for the memory of one packed copy of the weights: the packings held
  // are dropped at each layer's next forward.
  bool pack_inference_weights = true;
};

// The config in force: process-wide (kernels run on pool threads), read on first use from the
// environment (a bad value throws, and the next use tries again).
DispatchConfig dispatch_config();
// Replaces it; throws Error, leaving it unchanged, if the level is unsupported by this CPU.
void set_dispatch_config(const DispatchConfig& config);

std::string_view bf16_conv_compute_name(Bf16ConvCompute mode);  // "auto", "dot", "widen"

// RAII: a scope runs under `config`, the previous one comes back after it (tests, benchmarks).
class ScopedDispatch {
 public:
  explicit ScopedDispatch(const DispatchConfig& config) : previous_(dispatch_config()) {
    set_dispatch_config(config);
  }
  ~ScopedDispatch() { set_dispatch_config(previous_); }
  ScopedDispatch(const ScopedDispatch&) = delete;
  ScopedDispatch& operator=(const ScopedDispatch&) = delete;

 private:
  DispatchConfig previous_;
};

// The common case: the config in force with another level (tests cover every path with it).
class ScopedIsa : public ScopedDispatch {
 public:
  explicit ScopedIsa(IsaLevel level) : ScopedDispatch(with_level(level)) {}

 private:
  static DispatchConfig with_level(IsaLevel level) {
    DispatchConfig c = dispatch_config();
    c.level = level;
    return c;
  }
};

}  // namespace mixprec
