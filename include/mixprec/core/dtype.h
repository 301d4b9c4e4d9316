#pragma once
// DType, its traits table and its promotion table: the one place that defines element types
// and their properties (name, size, precision, promotion), as tables rather than scattered
// switches (DESIGN.md section 9). It is not the only code that switches on DType: the SIMD
// headers' load_n/store_n/round_to, some kernels' dispatch and a few format readers do, where
// typed code begins; visit_dtype below is the helper to prefer for new code.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "mixprec/core/error.h"
#include "mixprec/core/float16.h"

namespace mixprec {

enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, U8, Bool };
inline constexpr std::size_t kNumDTypes = 8;

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // as printed and parsed: "f32", "bf16", ...
  std::size_t size;       // bytes per element
  bool is_floating;
  bool is_signed;
  int mantissa_bits;  // explicit fraction bits (0 for integers); epsilon = 2^-mantissa_bits
};

inline constexpr std::array<DTypeInfo, kNumDTypes> kDTypeTable{{
    {DType::F64, "f64", 8, true, true, 52},
    {DType::F32, "f32", 4, true, true, 23},
    {DType::F16, "f16", 2, true, true, 10},
    {DType::BF16, "bf16", 2, true, true, 7},
    {DType::I64, "i64", 8, false, true, 0},
    {DType::I32, "i32", 4, false, true, 0},
    {DType::U8, "u8", 1, false, false, 0},
    {DType::Bool, "bool", 1, false, false, 0},
}};
static_assert(kDTypeTable.size() == kNumDTypes);
static_assert(
    [] {
      for (std::size_t i = 0; i < kNumDTypes; ++i)
        if (static_cast<std::size_t>(kDTypeTable[i].dtype) != i) return false;
      return true;
    }(),
    "kDTypeTable rows must follow the DType enum order");

constexpr const DTypeInfo& info(DType t) { return kDTypeTable[static_cast<std::size_t>(t)]; }
constexpr std::size_t dtype_size(DType t) { return info(t).size; }
constexpr std::string_view dtype_name(DType t) { return info(t).name; }
constexpr bool is_floating(DType t) { return info(t).is_floating; }
constexpr bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

// Parses "f32", "bf16", ... (also the long forms "float32", "float16", "bfloat16", "float64").
DType parse_dtype(std::string_view name);

// Result dtype of a binary op on two tensors, as in PyTorch: the wider kind wins, and f16 with
// bf16 gives f32 because neither holds the other's values.
namespace detail {
using D = DType;
inline constexpr D kPromotion[kNumDTypes][kNumDTypes] = {
    //          F64     F32     F16     BF16    I64     I32     U8      Bool
    /* F64 */ {D::F64, D::F64, D::F64, D::F64, D::F64, D::F64, D::F64, D::F64},
    /* F32 */ {D::F64, D::F32, D::F32, D::F32, D::F32, D::F32, D::F32, D::F32},
    /* F16 */ {D::F64, D::F32, D::F16, D::F32, D::F16, D::F16, D::F16, D::F16},
    /* BF16*/ {D::F64, D::F32, D::F32, D::BF16, D::BF16, D::BF16, D::BF16, D::BF16},
    /* I64 */ {D::F64, D::F32, D::F16, D::BF16, D::I64, D::I64, D::I64, D::I64},
    /* I32 */ {D::F64, D::F32, D::F16, D::BF16, D::I64, D::I32, D::I32, D::I32},
    /* U8  */ {D::F64, D::F32, D::F16, D::BF16, D::I64, D::I32, D::U8, D::U8},
    /* Bool*/ {D::F64, D::F32, D::F16, D::BF16, D::I64, D::I32, D::U8, D::Bool},
};
static_assert(sizeof(kPromotion) / sizeof(kPromotion[0]) == kNumDTypes);
static_assert(
    [] {
      for (std::size_t a = 0; a < kNumDTypes; ++a)
        for (std::size_t b = 0; b < kNumDTypes; ++b)
          if (kPromotion[a][b] != kPromotion[b][a]) return false;
      return true;
    }(),
    "promotion must be symmetric");
}  // namespace detail

constexpr DType promote(DType a, DType b) {
  return detail::kPromotion[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
}

// C++ element type <-> DType.
template <DType D>
struct dtype_traits;
template <>
struct dtype_traits<DType::F64> {
  using type = double;
};
template <>
struct dtype_traits<DType::F32> {
  using type = float;
};
template <>
struct dtype_traits<DType::F16> {
  using type = Half;
};
template <>
struct dtype_traits<DType::BF16> {
  using type = BFloat16;
};
template <>
struct dtype_traits<DType::I64> {
  using type = int64_t;
};
template <>
struct dtype_traits<DType::I32> {
  using type = int32_t;
};
template <>
struct dtype_traits<DType::U8> {
  using type = uint8_t;
};
template <>
struct dtype_traits<DType::Bool> {
  using type = bool;
};
template <DType D>
using dtype_t = typename dtype_traits<D>::type;

template <typename T>
inline constexpr DType dtype_of = [] {
  if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, Half>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::I64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::U8;
  else {
    static_assert(std::is_same_v<T, bool>, "not a mixprec element type");
    return DType::Bool;
  }
}();

// The accumulator type, defined once: 16-bit floats and f32 accumulate in f32, f64 in f64,
// integers in i64.
template <typename T>
struct accumulator {
  using type = std::conditional_t<std::is_integral_v<T>, int64_t, float>;
};
template <>
struct accumulator<double> {
  using type = double;
};
template <typename T>
using acc_t = typename accumulator<T>::type;
static_assert(std::is_same_v<acc_t<BFloat16>, float> && std::is_same_v<acc_t<Half>, float>);

template <typename T>
struct TypeTag {
  using type = T;
};

// Switch on dtype once, at a kernel boundary: calls f(TypeTag<T>{}) with T the element type.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F64:
      return f(TypeTag<double>{});
    case DType::F32:
      return f(TypeTag<float>{});
    case DType::F16:
      return f(TypeTag<Half>{});
    case DType::BF16:
      return f(TypeTag<BFloat16>{});
    case DType::I64:
      return f(TypeTag<int64_t>{});
    case DType::I32:
      return f(TypeTag<int32_t>{});
    case DType::U8:
      return f(TypeTag<uint8_t>{});
    case DType::Bool:
      return f(TypeTag<bool>{});
  }
  MIXPREC_ASSERT(false && "unknown DType");
  __builtin_unreachable();
}

}  // namespace mixprec
