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
#include <tuple>
#include <type_traits>
#include <utility>

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

// C++ element type <-> DType: one list in DType enum order, read both ways.
using DTypeElements = std::tuple<double, float, Half, BFloat16, int64_t, int32_t, uint8_t, bool>;
static_assert(std::tuple_size_v<DTypeElements> == kNumDTypes);

template <DType D>
using dtype_t = std::tuple_element_t<static_cast<std::size_t>(D), DTypeElements>;

namespace detail {
template <typename T, std::size_t... I>
constexpr DType dtype_of_impl(std::index_sequence<I...>) {
  static_assert((std::is_same_v<T, std::tuple_element_t<I, DTypeElements>> || ...),
                "not a mixprec element type");
  std::size_t index = 0;
  ((std::is_same_v<T, std::tuple_element_t<I, DTypeElements>> ? (index = I) : 0), ...);
  return static_cast<DType>(index);
}
}  // namespace detail

template <typename T>
inline constexpr DType dtype_of = detail::dtype_of_impl<T>(std::make_index_sequence<kNumDTypes>{});
static_assert(dtype_of<BFloat16> == DType::BF16 && std::is_same_v<dtype_t<DType::U8>, uint8_t>);

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

namespace detail {
// One branch per row of DTypeElements, indexed by the DType: the switch, written once.
template <typename F, std::size_t... I>
decltype(auto) visit_dtype_impl(DType t, F& f, std::index_sequence<I...>) {
  using R = decltype(f(TypeTag<float>{}));
  static constexpr R (*kBranches[])(F&) = {
      +[](F& g) -> R { return g(TypeTag<std::tuple_element_t<I, DTypeElements>>{}); }...};
  MIXPREC_ASSERT(static_cast<std::size_t>(t) < kNumDTypes && "unknown DType");
  return kBranches[static_cast<std::size_t>(t)](f);
}
}  // namespace detail

// Switch on dtype once, at a kernel boundary: calls f(TypeTag<T>{}) with T the element type.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  return detail::visit_dtype_impl(t, f, std::make_index_sequence<kNumDTypes>{});
}

}  // namespace mixprec
