#pragma once
// The register-only loop every probe level runs, written once over a SIMD lane type S
// (simd_avx2.h, simd_avx512.h): kChains independent accumulators, each advanced by step(acc)
// once a round, enough chains to cover the instruction's latency x issue width. Include only
// from the probe's ISA units: internal linkage, as the SIMD headers (see simd_avx512.h).
#include <cstdint>

namespace mixprec::kernels::peak_detail {
namespace {

template <class S, int kChains, class Step>
void run_chains(int64_t iterations, Step step) {
  typename S::F acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = S::set1(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = step(acc[i]);
  typename S::F sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = S::add(sum, acc[i]);
  volatile float sink = S::reduce_add(sum);  // keeps the loop alive
  (void)sink;
}

// kChains chains of S::fmadd; the flops done (an FMA lane is 2).
template <class S, int kChains>
double fma_loop(int64_t iterations) {
  const typename S::F x = S::set1(0.999999f), y = S::set1(1e-7f);
  run_chains<S, kChains>(iterations, [&](typename S::F acc) { return S::fmadd(acc, x, y); });
  return static_cast<double>(iterations) * kChains * S::kWidth * 2;
}

}  // namespace
}  // namespace mixprec::kernels::peak_detail
