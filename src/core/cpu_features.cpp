#include "mixprec/core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

constexpr std::array<std::string_view, kNumIsaLevels> kIsaNames{"scalar", "avx2", "avx512",
                                                                "avx512bf16", "amx"};

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

std::string trim(std::string s) {
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? std::string{} : s.substr(first, last - first + 1);
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs leaf0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &leaf0.b, 4);
  std::memcpy(vendor + 4, &leaf0.d, 4);
  std::memcpy(vendor + 8, &leaf0.c, 4);
  f.vendor = vendor;

  char brand[49] = {};
  if (cpuid(0x80000000).a >= 0x80000004)
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
  f.model = trim(brand);
  f.logical_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const Regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  f.avx = bit(l1.c, 28);
  f.fma = bit(l1.c, 12);
  f.f16c = bit(l1.c, 29);
  if (leaf0.a >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512_fp16 = bit(l7.d, 23);
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_tile = bit(l7.d, 24);
    if (l7.a >= 1) f.avx512_bf16 = bit(cpuid(7, 1).a, 5);
  }
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;          // SSE + AVX state
    f.os_avx512 = (xcr0 & 0xE6) == 0xE6;     // + opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  }
  return f;
}

// Linux hands out the AMX tile state only to a process that asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM); asked once, on first need.
bool amx_permitted() {
  static const bool permitted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
}

}  // namespace

std::string_view isa_name(IsaLevel level) { return kIsaNames[static_cast<std::size_t>(level)]; }

IsaLevel parse_isa(std::string_view name) {
  for (IsaLevel level : kAllIsaLevels)
    if (isa_name(level) == name) return level;
  throw Error("unknown kernel level '" + std::string(name) +
              "'; expected one of scalar, avx2, avx512, avx512bf16, amx");
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool isa_supported(IsaLevel level) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.os_avx && f.avx && f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (level) {
    case IsaLevel::Scalar:
      return true;
    case IsaLevel::Avx2:
      return avx2;
    case IsaLevel::Avx512:
      return avx512;
    case IsaLevel::Avx512Bf16:
      return avx512 && f.avx512_bf16;
    case IsaLevel::Amx:
      return avx512 && f.avx512_bf16 && f.amx_tile && f.amx_bf16 && f.os_amx && amx_permitted();
  }
  return false;
}

bool vdpbf16ps_at_half_rate() {
  const CpuFeatures& f = cpu_features();
  return f.amx_tile && f.amx_bf16;
}

IsaLevel best_isa() {
  IsaLevel best = IsaLevel::Scalar;
  for (IsaLevel level : kAllIsaLevels)
    if (isa_supported(level)) best = level;
  return best;
}

}  // namespace mixprec
