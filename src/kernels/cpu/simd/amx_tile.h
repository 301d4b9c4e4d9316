#pragma once
// What the AMX translation units (*_amx.cpp) share: the tile configuration and the f32
// accumulator epilogue. Internal linkage (see simd_avx512.h for why); include only from
// *_amx.cpp.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "../gemm/gemm_internal.h"
#include "../gemm/gemm_tile.h"
#include "simd_avx512.h"

namespace mixprec::kernels::gemm_detail {
namespace {

constexpr int kAmxPanel = kAmxNr;  // columns per packed bf16 B panel (the GEMM's nr)

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows x 64 bytes (palette 1): f32 16 x 16, bf16 16 x 32, or 16 k pairs x 16.
inline void amx_configure_16x64() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  _tile_loadconfig(&cfg);
}

// The epilogue of an f32 accumulator block (cbuf, row stride kAmxPanel floats), written a few
// rows at a time so the AMX loops can interleave it with the next block's tile instructions
// (the vector units are idle while the tile unit works). Rows go to ep.c + r * ep.ldc. The
// common inference case (bias, ReLU or none, bf16 out) runs with hoisted constants; anything
// else row by row through the GEMM's epilogue. Both round once, RNE, bit-exact with the scalar
// rule.
class AmxRowWriter {
 public:
  AmxRowWriter() = default;
  AmxRowWriter(const float* cbuf, int rows, int cols, const TileEpilogue& ep) {
    reset(cbuf, rows, cols, ep);
  }
  // As constructing anew, in place (a writer holds a few vectors: no copy of a temporary).
  void reset(const float* cbuf, int rows, int cols, const TileEpilogue& ep) {
    using S = simd::Avx512;
    cbuf_ = cbuf;
    rows_ = rows;
    cols_ = cols;
    row_ = 0;
    ep_ = ep;
    bias0_ = bias1_ = S::zero();
    alpha_ = S::set1(1.0f);
    beta_ = S::zero();
    plain_ = ep.alpha == 1.0f && ep.beta == 0.0f && ep.residual == nullptr &&
             (ep.activation == Activation::None || ep.activation == Activation::ReLU) &&
             ep.c_dtype == DType::BF16;
    c_row_ = static_cast<std::size_t>(ep.ldc) * dtype_size(ep.c_dtype);
    r_row_ = ep.residual != nullptr
                 ? static_cast<std::size_t>(ep.residual_ld) * dtype_size(ep.residual_dtype)
                 : 0;
    if (plain_ && ep.bias != nullptr) {
      bias0_ = S::load_n(ep.bias, ep.bias_dtype, cols);
      bias1_ = S::load_n(static_cast<const char*>(ep.bias) + 16 * dtype_size(ep.bias_dtype),
                         ep.bias_dtype, cols - 16);
    }
    keep_ = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1u;
    // f32 out, linear epilogue (scores and partial sums in attention): hoisted as well.
    linear_f32_ = !plain_ && ep.c_dtype == DType::F32 && ep.residual == nullptr &&
                  ep.activation == Activation::None;
    if (linear_f32_) {
      if (ep.bias != nullptr) {
        bias0_ = S::load_n(ep.bias, ep.bias_dtype, cols);
        bias1_ = S::load_n(static_cast<const char*>(ep.bias) + 16 * dtype_size(ep.bias_dtype),
                           ep.bias_dtype, cols - 16);
      }
      alpha_ = S::set1(ep.alpha);
      beta_ = S::set1(ep.beta);
    }
  }
  int rows_left() const { return rows_ - row_; }

  // Writes up to n more rows; returns how many it wrote.
  int write(int n) {
    const int end = row_ + n < rows_ ? row_ + n : rows_;
    const int done = end - row_;
    for (; row_ < end; ++row_)
      plain_ ? plain_row() : linear_f32_ ? linear_f32_row() : generic_row();
    return done;
  }

 private:
  void generic_row() {
    const float* row = cbuf_ + row_ * kAmxPanel;
    __m512 acc[1][2] = {{_mm512_load_ps(row), _mm512_load_ps(row + 16)}};
    finish_tile<simd::Avx512, 1, 2>(acc, cols_, ep_);
    ep_.c = static_cast<char*>(ep_.c) + c_row_;
    if (ep_.residual != nullptr) ep_.residual = static_cast<const char*>(ep_.residual) + r_row_;
  }
  void linear_f32_row() {  // alpha * acc + beta * C + bias, as finish_tile orders it
    using S = simd::Avx512;
    float* out = reinterpret_cast<float*>(static_cast<char*>(ep_.c) + row_ * c_row_);
    const __mmask16 m0 = static_cast<__mmask16>(keep_), m1 = static_cast<__mmask16>(keep_ >> 16);
    __m512 v0 = _mm512_load_ps(cbuf_ + row_ * kAmxPanel);
    __m512 v1 = _mm512_load_ps(cbuf_ + row_ * kAmxPanel + 16);
    if (ep_.alpha != 1.0f) {
      v0 = _mm512_mul_ps(v0, alpha_);
      v1 = _mm512_mul_ps(v1, alpha_);
    }
    if (ep_.beta != 0.0f) {
      v0 = S::fmadd(_mm512_maskz_loadu_ps(m0, out), beta_, v0);
      v1 = S::fmadd(_mm512_maskz_loadu_ps(m1, out + 16), beta_, v1);
    }
    if (ep_.bias != nullptr) {
      v0 = _mm512_add_ps(v0, bias0_);
      v1 = _mm512_add_ps(v1, bias1_);
    }
    _mm512_mask_storeu_ps(out, m0, v0);
    _mm512_mask_storeu_ps(out + 16, m1, v1);
  }
  void plain_row() {
    using S = simd::Avx512;
    __m512 v0 = _mm512_add_ps(_mm512_load_ps(cbuf_ + row_ * kAmxPanel), bias0_);
    __m512 v1 = _mm512_add_ps(_mm512_load_ps(cbuf_ + row_ * kAmxPanel + 16), bias1_);
    if (ep_.activation == Activation::ReLU) {  // max(0, NaN) = NaN, as the GEMM epilogue
      v0 = S::max(S::zero(), v0);
      v1 = S::max(S::zero(), v1);
    }
    // vcvtne2ps2bf16 rounds to nearest even and quiets NaN as the scalar rule does, but reads
    // subnormal inputs as zero; a row holding one (rare) takes the integer RNE formula.
    __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0));
    const __m512i one = _mm512_set1_epi32(1), max_sub = _mm512_set1_epi32(0x007FFFFF);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __mmask16 sub0 = _mm512_cmplt_epu32_mask(
        _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v0), abs_mask), one), max_sub);
    const __mmask16 sub1 = _mm512_cmplt_epu32_mask(
        _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(v1), abs_mask), one), max_sub);
    if ((sub0 | sub1) != 0) [[unlikely]]
      both = _mm512_inserti64x4(_mm512_castsi256_si512(S::narrow_bf16(v0)), S::narrow_bf16(v1), 1);
    _mm512_mask_storeu_epi16(static_cast<char*>(ep_.c) + row_ * c_row_, keep_, both);
  }

  const float* cbuf_ = nullptr;
  int rows_ = 0, cols_ = 0, row_ = 0;
  TileEpilogue ep_{};
  bool plain_ = false, linear_f32_ = false;
  __m512 alpha_ = _mm512_set1_ps(1.0f), beta_ = _mm512_setzero_ps();
  std::size_t c_row_ = 0, r_row_ = 0;
  __m512 bias0_ = _mm512_setzero_ps(), bias1_ = _mm512_setzero_ps();
  __mmask32 keep_ = 0;
};

}  // namespace
}  // namespace mixprec::kernels::gemm_detail
