#include "mixprec/kernels/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "peak_internal.h"

namespace mixprec::kernels {

double measure_peak_gflops(PeakKind kind, int threads, double seconds) {
  const IsaLevel level = active_isa();
  double (*loop)(int64_t) = nullptr;
  if (kind == PeakKind::AmxBf16) {
    MIXPREC_CHECK(level >= IsaLevel::Amx, "[measure_peak_gflops] AMX tiles need the amx ",
                  "kernel level (AMX-BF16 in the CPU and the OS); active level is ",
                  isa_name(level));
    loop = peak_detail::tile_loop_amx;
  } else if (kind == PeakKind::Bf16Dot) {
    MIXPREC_CHECK(level >= IsaLevel::Avx512Bf16, "[measure_peak_gflops] bf16 dot products need ",
                  "the avx512bf16 kernel level; active level is ", isa_name(level));
    loop = peak_detail::dot_loop_avx512bf16;
  } else {
    MIXPREC_CHECK(level >= IsaLevel::Avx2, "[measure_peak_gflops] FMA needs the avx2 kernel level ",
                  "or above; active level is ", isa_name(level));
    loop = level >= IsaLevel::Avx512 ? peak_detail::fma_loop_avx512 : peak_detail::fma_loop_avx2;
  }
  MIXPREC_CHECK(threads >= 1, "[measure_peak_gflops] threads must be >= 1, got ", threads);

  // Calibrate the iteration count on one thread, then time all threads together.
  int64_t iterations = 1 << 16;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    loop(iterations);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > seconds / 4 || iterations > (int64_t{1} << 40)) {
      iterations =
          static_cast<int64_t>(static_cast<double>(iterations) * seconds / std::max(dt, 1e-9));
      break;
    }
    iterations *= 4;
  }
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    double flops = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += loop(iterations);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / dt / 1e9);
  }
  return best;
}

}  // namespace mixprec::kernels
