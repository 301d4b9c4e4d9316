#pragma once
// The online-softmax block update (attention_internal.h), written once against the SIMD
// interface and instantiated per level. Internal linkage (see simd_avx512.h).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../simd/dtype_dispatch.h"
#include "../simd/simd_math.h"
#include "attention_internal.h"

namespace mixprec::kernels::attention_detail {
namespace {

// Elements [from, to) of a row of dtype t set to 0.
template <class S>
void zero_fill(char* row, DType t, int from, int to) {
  const std::size_t size = dtype_size(t);
  for (int j = from; j < to; j += S::kWidth) S::store_n(row + j * size, t, S::zero(), to - j);
}

template <class S>
void block_update(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal, float* m, float* l,
                  void* p, DType p_dtype, int64_t ld_p, float* o, int64_t ld_o, int dv) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  const float neg_inf = -INFINITY;
  const std::size_t p_size = dtype_size(p_dtype);
  for (int r = 0; r < rows; ++r) {
    const float* srow = s + r * ld_s;
    char* prow = static_cast<char*>(p) + static_cast<std::size_t>(r * ld_p) * p_size;
    const int n = visible_columns(diagonal, r, cols);
    F vmax = S::set1(neg_inf);
    int j = 0;
    for (; j + W <= n; j += W) vmax = S::max(S::load(srow + j), vmax);
    if (j < n)
      vmax = S::max(S::fill_tail(S::load_n(srow + j, DType::F32, n - j), n - j, neg_inf), vmax);
    const float row_max = S::reduce_max(vmax);
    const float m_new = m[r] > row_max ? m[r] : row_max;
    if (m_new == neg_inf) {  // nothing visible yet: p = 0, state unchanged
      zero_fill<S>(prow, p_dtype, 0, cols);
      continue;
    }
    const float alpha = m[r] == neg_inf ? 0.0f : std::exp(m[r] - m_new);
    const F shift = S::set1(m_new);
    F vsum = S::zero();
    simd::with_load_dtype<S>(p_dtype, [&](auto dtype_tag) {
      constexpr DType pt = decltype(dtype_tag)::value;
      // Sum what is multiplied: e rounded to P's dtype, in registers (reloading the store just
      // made would stall on store forwarding).
      int j = 0;
      for (; j + W <= n; j += W) {
        const F e = simd::exp<S>(S::sub(S::load(srow + j), shift));
        S::store_n(prow + j * p_size, pt, e, W);
        vsum = S::add(vsum, S::round_to(pt, e));
      }
      if (j < n) {  // lanes past n hold exp(0 - max): not summed
        const int left = n - j;
        const F e = simd::exp<S>(S::sub(S::load_n(srow + j, DType::F32, left), shift));
        S::store_n(prow + j * p_size, pt, e, left);
        vsum = S::add(vsum, S::fill_tail(S::round_to(pt, e), left, 0.0f));
      }
    });
    zero_fill<S>(prow, p_dtype, n, cols);  // hidden keys
    l[r] = alpha * l[r] + S::reduce_add(vsum);
    if (alpha != 1.0f) {
      float* orow = o + r * ld_o;
      const F va = S::set1(alpha);
      for (int j = 0; j < dv; j += W)
        S::store_n(orow + j, DType::F32, S::mul(S::load_n(orow + j, DType::F32, dv - j), va),
                   dv - j);
    }
    m[r] = m_new;
  }
}

template <class S>
void recompute_probs(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal, const float* lse,
                     void* p_low, DType low, int64_t ld_low) {
  constexpr int W = S::kWidth;
  const std::size_t low_size = dtype_size(low);
  simd::with_load_dtype<S>(low, [&](auto dtype_tag) {
    constexpr DType lt = decltype(dtype_tag)::value;
    for (int r = 0; r < rows; ++r) {
      float* srow = s + r * ld_s;
      char* lrow = static_cast<char*>(p_low) + static_cast<std::size_t>(r * ld_low) * low_size;
      // A row that saw no key in the forward (lse = -inf) has no probability anywhere.
      const int n = lse[r] == -INFINITY ? 0 : visible_columns(diagonal, r, cols);
      const typename S::F shift = S::set1(lse[r]);
      auto probs = [&](int j, int lanes) {
        const typename S::F e = simd::exp<S>(S::sub(S::load_n(srow + j, DType::F32, lanes), shift));
        S::store_n(srow + j, DType::F32, e, lanes);
        if constexpr (lt != DType::F32) S::store_n(lrow + j * low_size, lt, e, lanes);
      };
      int j = 0;
      for (; j + W <= n; j += W) probs(j, W);  // whole vectors: constant masks
      if (j < n) probs(j, n - j);
      zero_fill<S>(reinterpret_cast<char*>(srow), DType::F32, n, cols);
      if constexpr (lt != DType::F32) zero_fill<S>(lrow, lt, n, cols);
    }
  });
}

template <class S>
void softmax_grad(const float* p, int64_t ld_p, const float* dp, int64_t ld_dp, int rows, int cols,
                  const float* delta, void* ds, DType ds_dtype, int64_t ld_ds) {
  constexpr int W = S::kWidth;
  const std::size_t ds_size = dtype_size(ds_dtype);
  simd::with_load_dtype<S>(ds_dtype, [&](auto dtype_tag) {
    constexpr DType dt = decltype(dtype_tag)::value;
    for (int r = 0; r < rows; ++r) {
      const float* prow = p + r * ld_p;
      const float* dprow = dp + r * ld_dp;
      char* dsrow = static_cast<char*>(ds) + static_cast<std::size_t>(r * ld_ds) * ds_size;
      const typename S::F d = S::set1(delta[r]);
      auto grad = [&](int j, int lanes) {
        S::store_n(dsrow + j * ds_size, dt,
                   S::mul(S::load_n(prow + j, DType::F32, lanes),
                          S::sub(S::load_n(dprow + j, DType::F32, lanes), d)),
                   lanes);
      };
      int j = 0;
      for (; j + W <= cols; j += W) grad(j, W);  // whole vectors: constant masks
      if (j < cols) grad(j, cols - j);
    }
  });
}

// attend_rows with the dtypes of K and V as constants (std::integral_constant) or not
// (simd::RuntimeDType), and the head dims' vector counts as constants (Vectors > 0: d and dv
// are Vectors whole vectors) or not (0): q and the output row then stay in registers, and the
// loads in the key loops lose their per-vector switch and mask.
template <class S, int Vectors, class KDType, class VDType>
void attend_rows_typed(const AttendRows& a, KDType k_dtype, VDType v_dtype) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr int kMaxVectors = Vectors > 0 ? Vectors : kAttendRowsMaxDim / W;
  const auto d = static_cast<int>(a.q.cols), dv = static_cast<int>(a.v.cols);
  const std::size_t q_size = dtype_size(a.q.dtype), k_size = dtype_size(k_dtype),
                    v_size = dtype_size(v_dtype), out_size = dtype_size(a.out.dtype);
  const int q_vectors = Vectors > 0 ? Vectors : (d + W - 1) / W;
  const int v_vectors = Vectors > 0 ? Vectors : (dv + W - 1) / W;
  // Lanes of vector c of a row of `size` elements: W when the counts are constants.
  auto lanes = [](int size, int c) { return Vectors > 0 ? W : size - c * W; };
  // Row j of a matrix: its start and row length in bytes, in locals (the stores below into
  // float memory would otherwise make the compiler reload them from `a` at every key).
  struct Rows {
    const char* base;
    std::size_t bytes;
    const char* operator()(int64_t j) const { return base + static_cast<std::size_t>(j) * bytes; }
  };
  auto rows_of = [](const auto& m, std::size_t size) {
    return Rows{static_cast<const char*>(m.data), static_cast<std::size_t>(m.row_stride) * size};
  };
  const Rows q_row = rows_of(a.q, q_size), k_row = rows_of(a.k, k_size),
             v_row = rows_of(a.v, v_size), out_row = rows_of(a.out, out_size);
  for (int r = 0; r < a.q.rows; ++r) {
    const int n = visible_columns(a.diagonal, r, static_cast<int>(a.k.rows));
    const char* q = q_row(r);
    F qv[kMaxVectors];
    for (int c = 0; c < q_vectors; ++c)
      qv[c] = S::load_n(q + c * W * q_size, a.q.dtype, lanes(d, c));
    float* s = a.scores;
    for (int j = 0; j < n; ++j) {  // s_j = scale (q . k_j), as the blocked path's epilogue
      const char* k = k_row(j);
      F acc = S::zero();
      for (int c = 0; c < q_vectors; ++c)
        acc = S::fmadd(qv[c], S::load_n(k + c * W * k_size, k_dtype, lanes(d, c)), acc);
      s[j] = a.scale * S::reduce_add(acc);
    }
    const std::size_t mask_size = dtype_size(a.mask_dtype);
    const char* mask =
        a.mask == nullptr ? nullptr : a.mask + static_cast<std::size_t>(r * a.mask_ld) * mask_size;
    F vmax = S::set1(-INFINITY);
    for (int j = 0; j < n; j += W) {  // + mask, and the row's max
      F x = S::load_n(s + j, DType::F32, n - j);
      if (mask != nullptr) {
        x = S::add(x, S::load_n(mask + j * mask_size, a.mask_dtype, n - j));
        S::store_n(s + j, DType::F32, x, n - j);
      }
      vmax = S::max(vmax, S::fill_tail(x, n - j, -INFINITY));
    }
    const float max = S::reduce_max(vmax);
    char* out = const_cast<char*>(out_row(r));
    if (max == -INFINITY) {  // no key visible, or every one masked: zeros, as the blocked path
      for (int c = 0; c < v_vectors; ++c)
        S::store_n(out + c * W * out_size, a.out.dtype, S::zero(), lanes(dv, c));
      if (a.lse != nullptr) a.lse[r * a.lse_stride] = -INFINITY;
      continue;
    }
    const F shift = S::set1(max);
    F vsum = S::zero();
    for (int j = 0; j < n; j += W) {  // p_j = e^(s_j - max), in place
      const F e = simd::exp<S>(S::sub(S::load_n(s + j, DType::F32, n - j), shift));
      S::store_n(s + j, DType::F32, e, n - j);
      vsum = S::add(vsum, S::fill_tail(e, n - j, 0.0f));
    }
    const float sum = S::reduce_add(vsum);
    F acc[kMaxVectors];
    for (int c = 0; c < v_vectors; ++c) acc[c] = S::zero();
    for (int j = 0; j < n; ++j) {  // sum_j p_j v_j
      const char* v = v_row(j);
      const F p = S::set1(s[j]);
      for (int c = 0; c < v_vectors; ++c)
        acc[c] = S::fmadd(p, S::load_n(v + c * W * v_size, v_dtype, lanes(dv, c)), acc[c]);
    }
    const F inv = S::set1(1.0f / sum);
    for (int c = 0; c < v_vectors; ++c)
      S::store_n(out + c * W * out_size, a.out.dtype, S::mul(acc[c], inv), lanes(dv, c));
    if (a.lse != nullptr) a.lse[r * a.lse_stride] = max + std::log(sum);
  }
}

template <class S, class KDType, class VDType>
void attend_rows_sized(const AttendRows& a, KDType k_dtype, VDType v_dtype) {
  constexpr int W = S::kWidth;
  if (a.q.cols == a.v.cols && W > 1) {  // the common head dims, whole vectors: counts as constants
    switch (a.q.cols) {
      case 2 * W:
        return attend_rows_typed<S, 2>(a, k_dtype, v_dtype);
      case 4 * W:
        return attend_rows_typed<S, 4>(a, k_dtype, v_dtype);
      case 8 * W:
        return attend_rows_typed<S, 8>(a, k_dtype, v_dtype);
      default:
        break;
    }
  }
  attend_rows_typed<S, 0>(a, k_dtype, v_dtype);
}

template <class S>
void attend_rows(const AttendRows& a) {
  if (a.k.dtype == a.v.dtype &&
      simd::with_load_dtype<S>(a.k.dtype, [&](auto t) { attend_rows_sized<S>(a, t, t); }))
    return;
  attend_rows_sized<S>(a, simd::RuntimeDType{a.k.dtype}, simd::RuntimeDType{a.v.dtype});
}

}  // namespace
}  // namespace mixprec::kernels::attention_detail
