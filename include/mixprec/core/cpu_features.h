#pragma once
// What the CPU can do: detected once (cpuid plus the OS's XCR0 state-save support). Which
// level the kernels run at is core/dispatch.h's (DispatchConfig; MIXPREC_ISA forces a level so
// that every path can be tested on one machine).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mixprec {

// Kernel levels, lowest first. Each level implies the ones below it.
//   avx2       AVX2 + FMA + F16C
//   avx512     AVX-512 F/BW/VL/DQ
//   avx512bf16 AVX-512 BF16 (vdpbf16ps, vcvtneps2bf16)
//   amx        AMX-BF16 tiles, with the OS's permission to use them (asked once per process)
enum class IsaLevel : uint8_t { Scalar, Avx2, Avx512, Avx512Bf16, Amx };
inline constexpr std::size_t kNumIsaLevels = 5;
inline constexpr std::array<IsaLevel, kNumIsaLevels> kAllIsaLevels{
    IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512, IsaLevel::Avx512Bf16, IsaLevel::Amx};

std::string_view isa_name(IsaLevel level);
IsaLevel parse_isa(std::string_view name);  // throws Error naming the valid levels

struct CpuFeatures {
  std::string vendor;
  std::string model;
  int logical_cores = 1;
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false;
  // The OS saves the wider register state on context switch (XCR0), so the unit is usable.
  bool os_avx = false, os_avx512 = false, os_amx = false;
};

const CpuFeatures& cpu_features();  // detected on first use

bool isa_supported(IsaLevel level);  // the CPU and the OS both allow it

// Whether this core issues vdpbf16ps at half the rate of the f32 FMA, so that below the amx level
// a bf16 product is about twice as fast widened to f32. True on Intel's AMX cores (Sapphire
// Rapids and later: 113 against 215 GFLOP/s per core, docs/PERFORMANCE.md), where the kernels
// fall to vdpbf16ps only when AMX is forced off or the OS has not enabled it; the other cores
// measured (AMD Zen 4 and 5) run it at the FMA's rate, twice the f32 flops. Read from cpuid,
// never timed, so a choice made on it is the same every run.
bool vdpbf16ps_at_half_rate();
IsaLevel best_isa();                 // highest supported level

// The level kernels dispatch on: DispatchConfig::level (core/dispatch.h), which is MIXPREC_ISA
// when set (an unknown or unsupported level throws Error), else best_isa().
IsaLevel active_isa();

// A table of kernel variants indexed by level, for families whose candidates differ only by
// level (the others use a candidate list, kernels/cpu/isa/candidates.h); an empty slot falls
// back to the next level below (every table has a scalar reference in slot 0).
template <typename Fn>
struct IsaTable {
  std::array<Fn*, kNumIsaLevels> variants{};

  Fn* operator()() const { return at(active_isa()); }
  Fn* at(IsaLevel level) const {
    for (auto i = static_cast<std::size_t>(level);; --i)
      if (variants[i] != nullptr || i == 0) return variants[i];
  }
};

}  // namespace mixprec
