#include "mixprec/core/dtype.h"

#include <string>

namespace mixprec {

DType parse_dtype(std::string_view name) {
  for (const DTypeInfo& row : kDTypeTable)
    if (row.name == name) return row.dtype;
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float64", DType::F64}, {"float32", DType::F32}, {"float16", DType::F16},
      {"fp16", DType::F16},    {"fp32", DType::F32},    {"bfloat16", DType::BF16},
      {"int64", DType::I64},   {"int32", DType::I32},   {"uint8", DType::U8}};
  for (const Alias& a : kAliases)
    if (a.name == name) return a.dtype;
  throw Error("[parse_dtype] unknown dtype '" + std::string(name) +
              "'; expected one of f64, f32, f16, bf16, i64, i32, u8, bool");
}

}  // namespace mixprec
