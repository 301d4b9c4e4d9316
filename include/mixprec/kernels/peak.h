#pragma once
// The machine's arithmetic peak, measured: tight loops of independent register-only FMAs (or
// bf16 dot products), so kernel benchmarks can say "% of this machine's peak" instead of
// quoting a datasheet.
#include <cstdint>

namespace mixprec::kernels {

enum class PeakKind : uint8_t {
  F32Fma,   // vfmadd231ps at the widest vector the active kernel level has
  Bf16Dot,  // vdpbf16ps (needs the avx512bf16 level)
  AmxBf16,  // tdpbf16ps on AMX tiles (needs AMX-BF16 and the avx512bf16 level)
};

// GFLOP/s summed over `threads` threads (1 FMA = 2 flops; 1 vdpbf16ps lane = 4 flops;
// 1 tdpbf16ps = 16 x 16 x 32 x 2 flops), best of
// a few repetitions of about `seconds` each. Throws Error if the kind needs a level the CPU
// lacks.
double measure_peak_gflops(PeakKind kind, int threads, double seconds = 0.2);

}  // namespace mixprec::kernels
