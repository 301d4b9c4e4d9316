#pragma once
#include <cstdint>

namespace mixprec::kernels::peak_detail {

// Each runs `iterations` rounds of register-only work and returns the flops performed.
double fma_loop_avx2(int64_t iterations);
double fma_loop_avx512(int64_t iterations);
double dot_loop_avx512bf16(int64_t iterations);
double tile_loop_amx(int64_t iterations);  // configures and releases the tiles itself

}  // namespace mixprec::kernels::peak_detail
