#pragma once
// The fused optimizer updates, written once against the SIMD interface (simd_scalar.h) and
// instantiated per level by optim_<level>.cpp. R supplies the random bits of stochastic
// rounding at S's width (HashRandom<S> below, one generator for every level):
//   R::unit(key0, key1, index)        lanes j: hash_bits(key0, key1, index + j) / 2^32 on its
//                                     top 24 bits, a uniform f32 in [0, 1)
//   R::round_bf16(x, key0, key1, index)  x stochastically rounded to a bf16 value (as f32)
// Internal linkage throughout (see simd_avx512.h for why).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../elementwise/elementwise_impl.h"  // ScalarF64, lane_t, kLaneDType, kIsF64
#include "optim_kernels.h"

namespace mixprec::kernels::optim_detail {
namespace {

using elementwise_detail::kIsF64;
using elementwise_detail::kLaneDType;
using elementwise_detail::lane_t;
using elementwise_detail::ScalarF64;

// hash_bits (optim_kernels.h) at S's width, in S's u32 lanes: bit-exact with the scalar one.
template <class S>
struct HashRandom {
  using F = typename S::F;
  using U = typename S::U;

  static U lowbias32_lanes(U x) {
    x = S::u_xor(x, S::u_shr(x, 16));
    x = S::u_mul(x, S::u_set1(0x7feb352du));
    x = S::u_xor(x, S::u_shr(x, 15));
    x = S::u_mul(x, S::u_set1(0x846ca68bu));
    return S::u_xor(x, S::u_shr(x, 16));
  }
  // Lane j: hash_bits(key0, key1, index + j).
  static U hash(uint32_t key0, uint32_t key1, uint32_t index) {
    const U x = S::u_add(S::u_set1(index + key0), S::u_iota());
    return lowbias32_lanes(S::u_xor(lowbias32_lanes(x), S::u_set1(key1)));
  }
  static F unit(uint32_t key0, uint32_t key1, uint32_t index) {
    return S::mul(S::u_to_float(S::u_shr(hash(key0, key1, index), 8)), S::set1(0x1p-24f));
  }
  // NaN lanes come back unchanged: the store quiets them, as round to nearest even does.
  static F round_bf16(F x, uint32_t key0, uint32_t key1, uint32_t index) {
    const U noise = S::u_shr(hash(key0, key1, index), 16);
    const U bits = S::u_and(S::u_add(S::bits(x), noise), S::u_set1(0xFFFF0000u));
    return S::select_nan(x, x, S::from_bits(bits));
  }
};

// No random bits on the f64 path: f64 parameters are never rounded to 16 bits.
struct NoRandom {};

// Stochastic rounding to f16 in exact f32 steps (optim.h has the rule). Lanes that are zero,
// inf or NaN come back unchanged.
template <class S>
typename S::F round_f16_stochastic(typename S::F x, typename S::F u) {
  using F = typename S::F;
  const F a = S::abs(x);
  // The exponent of the f16 ulp is max(e, -14) - 10; below 2^-14 (f16 subnormals) it is -24.
  const F e = S::select_less(a, S::set1(0x1p-14f), S::set1(-14.0f), S::get_exponent(a));
  const F n = S::sub(S::set1(10.0f), e);
  const F q = S::scale2(a, n);  // |x| in ulps, exact
  const F k = S::trunc_int(q);
  const F up = S::select_less(u, S::sub(q, k), S::set1(1.0f), S::zero());
  F r = S::scale2(S::add(k, up), S::sub(S::zero(), n));
  r = S::mul(r, S::select_negative(x, S::set1(-1.0f), S::set1(1.0f)));
  r = S::select_less(a, S::set1(__builtin_inff()), r, x);
  return S::select_less(S::zero(), a, r, x);
}

template <class S>
[[gnu::always_inline]] inline typename S::F load_at(const void* base, DType t, int64_t i, int n) {
  return S::load_n(static_cast<const char*>(base) + i * static_cast<int64_t>(dtype_size(t)), t, n);
}

template <class S>
[[gnu::always_inline]] inline void store_at(void* base, DType t, int64_t i, typename S::F v,
                                            int n) {
  S::store_n(static_cast<char*>(base) + i * static_cast<int64_t>(dtype_size(t)), t, v, n);
}

// Writes the updated value p into the parameter: rounded to nearest even by the store, or
// first rounded stochastically to a value the store then keeps exactly.
template <class S, class R>
[[gnu::always_inline]] inline void store_param(const OptimRun& r, int64_t i, int n,
                                               typename S::F p) {
  if constexpr (!kIsF64<S>) {
    if (r.stochastic) {
      const uint32_t index = r.index_lo + static_cast<uint32_t>(i);
      if (r.param_dtype == DType::BF16)
        p = R::round_bf16(p, r.key0, r.key1, index);
      else if (r.param_dtype == DType::F16)
        p = round_f16_stochastic<S>(p, R::unit(r.key0, r.key1, index));
    }
  }
  store_at<S>(r.param, r.param_dtype, i, p, n);
}

// The starting value of the update: the master weight when there is one.
template <class S>
[[gnu::always_inline]] inline typename S::F load_weight(const OptimRun& r, int64_t i, int n) {
  if (r.master != nullptr) return S::load_n(r.master + i, DType::F32, n);
  return load_at<S>(r.param, r.param_dtype, i, n);
}

template <class S>
[[gnu::always_inline]] inline void store_master(const OptimRun& r, int64_t i, int n,
                                                typename S::F p) {
  if (r.master != nullptr) S::store_n(r.master + i, DType::F32, p, n);
}

template <class S, class R>
void adam_run(const AdamConsts& c, const OptimRun& r) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr DType kL = kLaneDType<S>;
  const F beta2 = S::set1(static_cast<L>(c.beta2));
  const F one_minus_beta1 = S::set1(static_cast<L>(c.one_minus_beta1));
  const F one_minus_beta2 = S::set1(static_cast<L>(c.one_minus_beta2));
  const F step_size = S::set1(static_cast<L>(c.step_size));
  const F sqrt_bc2 = S::set1(static_cast<L>(c.sqrt_bc2));
  const F eps = S::set1(static_cast<L>(c.eps));
  const F l2 = S::set1(static_cast<L>(c.l2));
  const F decay = S::set1(static_cast<L>(c.decay));
  L* m_base = static_cast<L*>(r.state0);  // (n,) exp_avg
  L* v_base = static_cast<L*>(r.state1);  // (n,) exp_avg_sq
  for (int64_t i = 0; i < r.n; i += S::kWidth) {
    const int n = static_cast<int>(std::min<int64_t>(S::kWidth, r.n - i));
    F g = load_at<S>(r.grad, r.grad_dtype, i, n);
    F p = load_weight<S>(r, i, n);
    if (c.l2 != 0) g = S::fmadd(l2, p, g);
    if (c.has_decay) p = S::mul(p, decay);
    F m = S::load_n(m_base + i, kL, n);
    F v = S::load_n(v_base + i, kL, n);
    m = S::fmadd(one_minus_beta1, S::sub(g, m), m);  // lerp toward g, as PyTorch
    v = S::fmadd(S::mul(one_minus_beta2, g), g, S::mul(beta2, v));
    const F denom = S::add(S::div(S::sqrt(v), sqrt_bc2), eps);
    p = S::sub(p, S::mul(step_size, S::div(m, denom)));
    S::store_n(m_base + i, kL, m, n);
    S::store_n(v_base + i, kL, v, n);
    store_master<S>(r, i, n, p);
    store_param<S, R>(r, i, n, p);
  }
}

template <class S, class R>
void sgd_run(const SgdConsts& c, const OptimRun& r) {
  using F = typename S::F;
  using L = lane_t<S>;
  constexpr DType kL = kLaneDType<S>;
  const F lr = S::set1(static_cast<L>(c.lr));
  const F momentum = S::set1(static_cast<L>(c.momentum));
  const F weight_decay = S::set1(static_cast<L>(c.weight_decay));
  L* b_base = static_cast<L*>(r.state0);  // (n,) momentum buffer, or nullptr
  for (int64_t i = 0; i < r.n; i += S::kWidth) {
    const int n = static_cast<int>(std::min<int64_t>(S::kWidth, r.n - i));
    F d = load_at<S>(r.grad, r.grad_dtype, i, n);
    F p = load_weight<S>(r, i, n);
    if (c.weight_decay != 0) d = S::fmadd(weight_decay, p, d);
    if (b_base != nullptr) {
      const F b = c.first ? d : S::fmadd(momentum, S::load_n(b_base + i, kL, n), d);
      S::store_n(b_base + i, kL, b, n);
      d = c.nesterov ? S::fmadd(momentum, b, d) : b;
    }
    p = S::sub(p, S::mul(lr, d));
    store_master<S>(r, i, n, p);
    store_param<S, R>(r, i, n, p);
  }
}

template <class S, class R>
const OptimKernels& optim_kernels() {
  static constexpr OptimKernels kernels{&adam_run<S, R>, &sgd_run<S, R>};
  return kernels;
}

}  // namespace
}  // namespace mixprec::kernels::optim_detail
