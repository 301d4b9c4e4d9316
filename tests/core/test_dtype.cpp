#include <gtest/gtest.h>

#include "mixprec/core/dtype.h"
#include "mixprec/core/error.h"

namespace mixprec {
namespace {

TEST(DType, TraitsTable) {
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(dtype_size(DType::U8), 1u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  EXPECT_TRUE(is_floating(DType::BF16));
  EXPECT_FALSE(is_floating(DType::I32));
  EXPECT_EQ(dtype_name(DType::BF16), "bf16");
  visit_dtype(DType::F16, [](auto tag) {
    using T = typename decltype(tag)::type;
    EXPECT_EQ(sizeof(T), 2u);
    EXPECT_EQ(dtype_of<T>, DType::F16);
  });
  for (const DTypeInfo& row : kDTypeTable)
    visit_dtype(row.dtype, [&](auto tag) {
      EXPECT_EQ(sizeof(typename decltype(tag)::type), row.size) << row.name;
    });
}

TEST(DType, ParseNamesAndAliases) {
  for (const DTypeInfo& row : kDTypeTable) EXPECT_EQ(parse_dtype(row.name), row.dtype);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(parse_dtype("fp16"), DType::F16);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'f8'"), std::string::npos);
  }
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote(DType::F16, DType::BF16), DType::F32);
  EXPECT_EQ(promote(DType::BF16, DType::F16), DType::F32);
  EXPECT_EQ(promote(DType::BF16, DType::F32), DType::F32);
  EXPECT_EQ(promote(DType::F16, DType::F16), DType::F16);
  EXPECT_EQ(promote(DType::BF16, DType::I64), DType::BF16);
  EXPECT_EQ(promote(DType::F32, DType::F64), DType::F64);
  EXPECT_EQ(promote(DType::U8, DType::I32), DType::I32);
  EXPECT_EQ(promote(DType::Bool, DType::U8), DType::U8);
  EXPECT_EQ(promote(DType::Bool, DType::Bool), DType::Bool);
  // Every float result holds both inputs' kinds: never an integer from a float.
  for (const DTypeInfo& a : kDTypeTable)
    for (const DTypeInfo& b : kDTypeTable) {
      const DType r = promote(a.dtype, b.dtype);
      if (a.is_floating || b.is_floating) {
        EXPECT_TRUE(is_floating(r));
      }
      EXPECT_GE(dtype_size(r), std::min(a.size, b.size));
    }
}

}  // namespace
}  // namespace mixprec
