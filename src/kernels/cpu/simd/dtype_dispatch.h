#pragma once
// A float dtype as a compile-time value: a kernel switches on an operand's dtype once, at its
// entry, and the loads and stores below it (S::load_n / S::store_n with a constant dtype) lose
// their per-vector switch.
#include <type_traits>

#include "mixprec/core/dtype.h"

namespace mixprec::kernels::simd {

// S computes in f64 (the f64 path's width-1 interface).
template <class S>
inline constexpr bool kIsF64 = std::is_same_v<typename S::F, double>;

// Calls f(std::integral_constant<DType, t>) for t = f32, f16 or bf16, and f64 where S computes
// in f64 (the f64 path), and returns true. Other dtypes call nothing and return false: a kernel
// with a general path takes it then.
template <class S, class Fn>
bool with_load_dtype(DType t, Fn&& f) {
  switch (t) {
    case DType::F32:
      f(std::integral_constant<DType, DType::F32>{});
      return true;
    case DType::F16:
      f(std::integral_constant<DType, DType::F16>{});
      return true;
    case DType::BF16:
      f(std::integral_constant<DType, DType::BF16>{});
      return true;
    default:
      if constexpr (kIsF64<S>) {
        if (t == DType::F64) {
          f(std::integral_constant<DType, DType::F64>{});
          return true;
        }
      }
      return false;
  }
}

// A dtype known only at run time, usable where a std::integral_constant<DType, t> is: a kernel
// templated on either gets constant-dtype loads and stores in its common case and still runs
// the rest.
struct RuntimeDType {
  DType value;
  constexpr operator DType() const { return value; }
};

}  // namespace mixprec::kernels::simd
