#pragma once
// The elementwise kernels, written once against the SIMD interface (simd_scalar.h) and
// instantiated per level by elementwise_<level>.cpp, plus what every non-GEMM kernel family
// shares (reductions, softmax, norms and losses include this):
//   ScalarF64    the f64 path: the same templates at width 1 on doubles
//   Math<S>      the transcendental functions: simd_math.h for f32 lanes, the C library for f64
//   activate     the fused activations of bias_activation and group_norm
//   load_lanes / store_lanes   up to kWidth elements at any stride
// Internal linkage throughout (see simd_avx512.h for why).
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "elementwise_kernels.h"
#include "mixprec/core/float16.h"
#include "mixprec/kernels/convert.h"
#include "../simd/dtype_dispatch.h"
#include "../simd/simd_math.h"
#include "../simd/simd_math_grad.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels::elementwise_detail {
namespace {

// The SIMD interface at width 1 on doubles: f64 tensors (gradient checks) compute in f64.
// Loads widen any float dtype exactly; stores round once, to 16-bit formats through the
// conversion kernel, which rounds from f64 directly (no double rounding through f32). It has
// the members the kernel templates call; the transcendental functions go through Math<S>,
// which sends f64 to the C library, so simd_math.h's needs (exponent tricks) are not here.
struct ScalarF64 : simd::ScalarLane<double> {
  // f32, f16 and bf16 widen exactly as the f32 level loads them (and exactly again to f64).
  static F load_n(const void* p, DType t, int n) {
    if (t == DType::F64) return n <= 0 ? 0.0 : *static_cast<const double*>(p);
    return simd::Scalar::load_n(p, t, n);
  }
  static void store_n(void* p, DType t, F v, int n) {
    if (n <= 0) return;
    switch (t) {
      case DType::F64:
        *static_cast<double*>(p) = v;
        break;
      case DType::F32:
        *static_cast<float*>(p) = static_cast<float>(v);
        break;
      default:
        convert(&v, DType::F64, p, t, 1);
        break;
    }
  }
};

using simd::kIsF64;
// What one lane holds, and the dtype of scratch arrays of lanes.
template <class S>
using lane_t = std::conditional_t<kIsF64<S>, double, float>;
template <class S>
inline constexpr DType kLaneDType = kIsF64<S> ? DType::F64 : DType::F32;

template <class S>
struct Math {
  using F = typename S::F;
  static F exp(F x) {
    if constexpr (kIsF64<S>)
      return std::exp(x);
    else
      return simd::exp_full<S>(x);
  }
  static F log(F x) {
    if constexpr (kIsF64<S>)
      return std::log(x);
    else
      return simd::log<S>(x);
  }
  static F tanh(F x) {
    if constexpr (kIsF64<S>)
      return std::tanh(x);
    else
      return simd::tanh<S>(x);
  }
  static F sigmoid(F x) {
    if constexpr (kIsF64<S>)
      return 1.0 / (1.0 + std::exp(-x));
    else
      return simd::sigmoid<S>(x);
  }
  static F silu(F x) {
    if constexpr (kIsF64<S>)
      return x / (1.0 + std::exp(-x));
    else
      return simd::silu<S>(x);
  }
  static F gelu_tanh(F x) {
    if constexpr (kIsF64<S>)
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    else
      return simd::gelu_tanh<S>(x);
  }
  static F gelu_erf(F x) {  // erfc keeps the tail for negative x
    if constexpr (kIsF64<S>)
      return 0.5 * x * std::erfc(-x * 0.70710678118654752);
    else
      return simd::gelu_erf<S>(x);
  }
  static F pow(F a, F b) {  // lane by lane: no vector pow, and the same result on every level
    if constexpr (kIsF64<S>) {
      return std::pow(a, b);
    } else {
      alignas(64) float x[S::kWidth], y[S::kWidth];
      S::store(x, a);
      S::store(y, b);
      // The builtin calls libm's powf directly: no inline std:: wrapper gets compiled with
      // this level's instruction set (see simd_avx512.h on why that matters).
      for (int i = 0; i < S::kWidth; ++i) x[i] = __builtin_powf(x[i], y[i]);
      return S::load(x);
    }
  }
};

using simd::with_load_dtype;

template <class S, Activation A>
typename S::F activate(typename S::F v) {
  using M = Math<S>;
  if constexpr (A == Activation::None)
    return v;
  else if constexpr (A == Activation::ReLU)
    return S::max(S::zero(), v);  // NaN passes
  else if constexpr (A == Activation::GeluTanh)
    return M::gelu_tanh(v);
  else if constexpr (A == Activation::GeluErf)
    return M::gelu_erf(v);
  else
    return M::silu(v);
}

// Calls f(std::integral_constant<Activation, act>) with the activation as a compile-time
// value, so that loops are instantiated per activation instead of switching per vector.
template <class Fn>
void with_activation(Activation act, Fn&& f) {
  switch (act) {
    case Activation::None:
      return f(std::integral_constant<Activation, Activation::None>{});
    case Activation::ReLU:
      return f(std::integral_constant<Activation, Activation::ReLU>{});
    case Activation::GeluTanh:
      return f(std::integral_constant<Activation, Activation::GeluTanh>{});
    case Activation::GeluErf:
      return f(std::integral_constant<Activation, Activation::GeluErf>{});
    case Activation::SiLU:
      return f(std::integral_constant<Activation, Activation::SiLU>{});
  }
}

// Strided lanes are gathered (scattered) as raw bytes through a buffer, so the conversion is
// the one of load_n (store_n). Kept out of line: the contiguous path stays small and inlined.
template <class S>
typename S::F gather_lanes(const char* p, DType t, int64_t stride, int m) {
  const auto elem = static_cast<int64_t>(dtype_size(t));
  alignas(64) unsigned char buf[S::kWidth * 8];
  for (int j = 0; j < m; ++j)
    std::memcpy(buf + j * elem, p + j * stride * elem, static_cast<std::size_t>(elem));
  return S::load_n(buf, t, m);
}

template <class S>
void scatter_lanes(char* p, DType t, int64_t stride, typename S::F v, int m) {
  const auto elem = static_cast<int64_t>(dtype_size(t));
  alignas(64) unsigned char buf[S::kWidth * 8];
  S::store_n(buf, t, v, m);
  for (int j = 0; j < m; ++j)
    std::memcpy(p + j * stride * elem, buf + j * elem, static_cast<std::size_t>(elem));
}

// Up to kWidth elements starting at p, `stride` elements apart (0 broadcasts one element).
// Forced inline: GCC otherwise keeps these as calls (load_n's dtype switch looks big), which
// costs more than the work of a vector.
template <class S>
[[gnu::always_inline]] inline typename S::F load_lanes(const char* p, DType t, int64_t stride,
                                                       int m) {
  if (S::kWidth == 1 || stride == 1) return S::load_n(p, t, m);
  if constexpr (requires { S::gather_f32(nullptr, int64_t{0}, 0); })
    if (t == DType::F32 && stride > -(int64_t{1} << 27) && stride < (int64_t{1} << 27))
      return S::gather_f32(reinterpret_cast<const float*>(p), stride, m);
  return gather_lanes<S>(p, t, stride, m);
}

template <class S>
[[gnu::always_inline]] inline void store_lanes(char* p, DType t, int64_t stride, typename S::F v,
                                               int m) {
  if (S::kWidth == 1 || stride == 1) {
    S::store_n(p, t, v, m);
    return;
  }
  if constexpr (requires { S::scatter_f32(nullptr, int64_t{0}, v, 0); })
    if (t == DType::F32 && stride > -(int64_t{1} << 27) && stride < (int64_t{1} << 27)) {
      S::scatter_f32(reinterpret_cast<float*>(p), stride, v, m);
      return;
    }
  scatter_lanes<S>(p, t, stride, v, m);
}

// One input of a run: a stride-0 input is loaded once, outside the loop.
template <class S>
struct Input {
  const char* data;
  DType dtype;
  int64_t stride;
  int64_t elem;
  typename S::F broadcast;

  Input(const Run& r, int k)
      : data(r.data[k]),
        dtype(r.dtype[k]),
        stride(r.stride[k]),
        elem(static_cast<int64_t>(dtype_size(r.dtype[k]))),
        broadcast(r.stride[k] == 0 ? load_lanes<S>(r.data[k], r.dtype[k], 0, S::kWidth)
                                   : S::zero()) {}
  [[gnu::always_inline]] typename S::F at(int64_t i, int m) const {
    return stride == 0 ? broadcast : load_lanes<S>(data + i * stride * elem, dtype, stride, m);
  }
};

// map_run's common case, every operand contiguous (or a scalar) in one dtype T: T is a
// constant, so the loads' and stores' dtype switches fold away, and whole vectors go unmasked
// (the tail alone is masked). A stride-0 input (a scalar operand) is loaded once, before the
// loop.
template <class S, DType T, int... k, class Fn>
void map_contiguous(const Run& r, Fn f) {
  using F = typename S::F;
  constexpr int W = S::kWidth;
  constexpr auto elem = static_cast<int64_t>(dtype_size(T));
  auto splat = [](const char* p) {  // the one element at p in every lane
    alignas(64) float first[W];
    S::store(first, S::load_n(p, T, 1));
    return S::set1(first[0]);
  };
  F broadcast[kMaxOperands];
  ((broadcast[k] = r.stride[k] == 0 ? splat(r.data[k]) : S::zero()), ...);
  auto lanes = [&](int operand, int64_t i, int m) {
    return r.stride[operand] == 0 ? broadcast[operand]
                                  : S::load_n(r.data[operand] + i * elem, T, m);
  };
  int64_t i = 0;
  // Four vectors computed before any is stored: an activation is a chain of some 25 dependent
  // vector operations (GELU, SiLU), and four independent chains in the loop body keep the
  // pipes busier than the out-of-order window manages alone (GELU 11% faster on a Zen 5).
  for (; i + 4 * W <= r.n; i += 4 * W) {
    const F y0 = f(lanes(k, i, W)...), y1 = f(lanes(k, i + W, W)...),
            y2 = f(lanes(k, i + 2 * W, W)...), y3 = f(lanes(k, i + 3 * W, W)...);
    S::store_n(r.data[0] + i * elem, T, y0, W);
    S::store_n(r.data[0] + (i + W) * elem, T, y1, W);
    S::store_n(r.data[0] + (i + 2 * W) * elem, T, y2, W);
    S::store_n(r.data[0] + (i + 3 * W) * elem, T, y3, W);
  }
  for (; i + W <= r.n; i += W) S::store_n(r.data[0] + i * elem, T, f(lanes(k, i, W)...), W);
  if (i < r.n) {
    const int m = static_cast<int>(r.n - i);
    S::store_n(r.data[0] + i * elem, T, f(lanes(k, i, m)...), m);
  }
}

// out[i] = f(in1[i], ..., inK[i]) over a run, K = sizeof...(k).
template <class S, int... k, class Fn>
void map_run(const Run& r, std::integer_sequence<int, k...>, Fn f) {
  constexpr int W = S::kWidth;
  if constexpr (W > 1) {
    if (r.stride[0] == 1 &&
        (((r.stride[k] == 1 || r.stride[k] == 0) && r.dtype[k] == r.dtype[0]) && ...)) {
      if (with_load_dtype<S>(r.dtype[0], [&](auto dtype_tag) {
            map_contiguous<S, decltype(dtype_tag)::value, k...>(r, f);
          }))
        return;
    }
  }
  const Input<S> in[] = {Input<S>(r, k)...};
  const auto out_elem = static_cast<int64_t>(dtype_size(r.dtype[0]));
  for (int64_t i = 0; i < r.n; i += W) {
    const int m = r.n - i < W ? static_cast<int>(r.n - i) : W;
    store_lanes<S>(r.data[0] + i * r.stride[0] * out_elem, r.dtype[0], r.stride[0],
                   f(in[k - 1].at(i, m)...), m);
  }
}

using One = std::integer_sequence<int, 1>;     // reads operand 1
using Two = std::integer_sequence<int, 1, 2>;  // reads operands 1 and 2

template <class S, UnaryOp Op>
typename S::F unary_fn(typename S::F x) {
  using M = Math<S>;
  if constexpr (Op == UnaryOp::Neg)
    return S::mul(S::set1(-1.0f), x);  // -0 for +0, NaN kept
  else if constexpr (Op == UnaryOp::Abs)
    return S::abs(x);
  else if constexpr (Op == UnaryOp::Square)
    return S::mul(x, x);
  else if constexpr (Op == UnaryOp::Reciprocal)
    return S::div(S::set1(1.0f), x);
  else if constexpr (Op == UnaryOp::Exp)
    return M::exp(x);
  else if constexpr (Op == UnaryOp::Log)
    return M::log(x);
  else if constexpr (Op == UnaryOp::Sqrt)
    return S::sqrt(x);
  else if constexpr (Op == UnaryOp::Rsqrt)
    return S::div(S::set1(1.0f), S::sqrt(x));
  else if constexpr (Op == UnaryOp::Relu)
    return S::max(S::zero(), x);
  else if constexpr (Op == UnaryOp::Sigmoid)
    return M::sigmoid(x);
  else if constexpr (Op == UnaryOp::Tanh)
    return M::tanh(x);
  else if constexpr (Op == UnaryOp::Silu)
    return M::silu(x);
  else if constexpr (Op == UnaryOp::GeluTanh)
    return M::gelu_tanh(x);
  else {
    static_assert(Op == UnaryOp::GeluErf && kNumUnaryOps == 14, "a new UnaryOp needs a case here");
    return M::gelu_erf(x);
  }
}

// The derivative of an activation (simd_math_grad.h; f64 from the C library, as defined).
template <class S, UnaryOp Op>
typename S::F unary_grad_fn(typename S::F x) {
  if constexpr (kIsF64<S>) {
    constexpr double kC = 0.79788456080286535588, kA = 0.044715;
    if constexpr (Op == UnaryOp::Sigmoid) {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 - s);
    } else if constexpr (Op == UnaryOp::Tanh) {
      const double t = std::tanh(x);
      return 1.0 - t * t;
    } else if constexpr (Op == UnaryOp::Silu) {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1.0 + x * (1.0 - s));
    } else if constexpr (Op == UnaryOp::GeluTanh) {
      const double t = std::tanh(kC * (x + kA * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kC * (1.0 + 3.0 * kA * x * x);
    } else {
      static_assert(Op == UnaryOp::GeluErf);
      return 0.5 * std::erfc(-x * 0.70710678118654752) +
             x * std::exp(-0.5 * x * x) * 0.39894228040143268;
    }
  } else {
    if constexpr (Op == UnaryOp::Sigmoid)
      return simd::sigmoid_grad<S>(x);
    else if constexpr (Op == UnaryOp::Tanh)
      return simd::tanh_grad<S>(x);
    else if constexpr (Op == UnaryOp::Silu)
      return simd::silu_grad<S>(x);
    else if constexpr (Op == UnaryOp::GeluTanh)
      return simd::gelu_tanh_grad<S>(x);
    else {
      static_assert(Op == UnaryOp::GeluErf);
      return simd::gelu_erf_grad<S>(x);
    }
  }
}

template <class S, UnaryOp Op>
void run_unary_grad(const Run& r) {
  using F = typename S::F;
  map_run<S>(r, Two{}, [](F x, F g) { return S::mul(g, unary_grad_fn<S, Op>(x)); });
}

template <class S, BinaryOp Op>
typename S::F binary_fn(typename S::F a, typename S::F b) {
  if constexpr (Op == BinaryOp::Add)
    return S::add(a, b);
  else if constexpr (Op == BinaryOp::Sub)
    return S::sub(a, b);
  else if constexpr (Op == BinaryOp::Mul)
    return S::mul(a, b);
  else if constexpr (Op == BinaryOp::Div)
    return S::div(a, b);
  else if constexpr (Op == BinaryOp::Pow)
    return Math<S>::pow(a, b);
  // x86 max/min return b when either is NaN; the select brings back a NaN in a.
  else if constexpr (Op == BinaryOp::Max)
    return S::select_nan(a, a, S::max(a, b));
  else {
    static_assert(Op == BinaryOp::Min && kNumBinaryOps == 7, "a new BinaryOp needs a case here");
    return S::select_nan(a, a, S::min(a, b));
  }
}

template <class S, std::size_t... I>
void run_unary(UnaryOp op, const Run& r, std::index_sequence<I...>) {
  using F = typename S::F;
  (void)((static_cast<std::size_t>(op) == I &&
          (map_run<S>(r, One{}, [](F x) { return unary_fn<S, static_cast<UnaryOp>(I)>(x); }),
           true)) ||
         ...);
}

template <class S, std::size_t... I>
void run_binary(BinaryOp op, const Run& r, std::index_sequence<I...>) {
  using F = typename S::F;
  (void)((static_cast<std::size_t>(op) == I &&
          (map_run<S>(r, Two{},
                      [](F a, F b) { return binary_fn<S, static_cast<BinaryOp>(I)>(a, b); }),
           true)) ||
         ...);
}

template <class S>
void run(const MapOp& op, const Run& r) {
  using F = typename S::F;
  switch (op.kind) {
    case MapKind::Unary:
      return run_unary<S>(op.unary, r, std::make_index_sequence<kNumUnaryOps>{});
    case MapKind::Binary:
      return run_binary<S>(op.binary, r, std::make_index_sequence<kNumBinaryOps>{});
    case MapKind::Clamp: {
      const F lo = S::set1(static_cast<lane_t<S>>(op.p0)),
              hi = S::set1(static_cast<lane_t<S>>(op.p1));
      return map_run<S>(r, One{}, [=](F x) { return S::min(hi, S::max(lo, x)); });  // NaN passes
    }
    case MapKind::Axpby: {
      const F alpha = S::set1(static_cast<lane_t<S>>(op.p0)),
              beta = S::set1(static_cast<lane_t<S>>(op.p1));
      return map_run<S>(r, Two{}, [=](F x, F y) { return S::fmadd(alpha, x, S::mul(beta, y)); });
    }
    case MapKind::UnaryGrad:
      switch (op.unary) {
        case UnaryOp::Sigmoid:
          return run_unary_grad<S, UnaryOp::Sigmoid>(r);
        case UnaryOp::Tanh:
          return run_unary_grad<S, UnaryOp::Tanh>(r);
        case UnaryOp::Silu:
          return run_unary_grad<S, UnaryOp::Silu>(r);
        case UnaryOp::GeluTanh:
          return run_unary_grad<S, UnaryOp::GeluTanh>(r);
        case UnaryOp::GeluErf:
          return run_unary_grad<S, UnaryOp::GeluErf>(r);
        default:
          return;  // the front end accepts only the ops above
      }
    case MapKind::BiasActivation:
      return with_activation(op.activation, [&](auto act) {
        map_run<S>(r, Two{},
                   [](F x, F b) { return activate<S, decltype(act)::value>(S::add(x, b)); });
      });
  }
}

}  // namespace
}  // namespace mixprec::kernels::elementwise_detail
