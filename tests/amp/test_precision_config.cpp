#include <gtest/gtest.h>

#include "mixprec/amp/precision_config.h"
#include "support/error_of.h"

namespace mixprec::amp {
namespace {

TEST(PrecisionConfig, PresetsParseAndNameThemselves) {
  for (const char* name : {"fp32", "bf16", "fp16", "bf16-params", "fp16-params"})
    EXPECT_EQ(PrecisionConfig::parse(name).name(), name);
  const PrecisionConfig fp16 = PrecisionConfig::parse("fp16");
  EXPECT_EQ(fp16.compute, DType::F16);
  EXPECT_EQ(fp16.params, DType::F32);
  EXPECT_TRUE(fp16.scaler_options().enabled);
  EXPECT_TRUE(fp16.scaler_options().dynamic);
  const PrecisionConfig bf16p = PrecisionConfig::parse("bf16-params");
  EXPECT_TRUE(bf16p.half_params());
  EXPECT_TRUE(bf16p.autocast());
  EXPECT_FALSE(bf16p.scaler_options().enabled);  // bf16 has f32's range: no scaling needed
  EXPECT_FALSE(PrecisionConfig::parse("fp32").autocast());
}

TEST(PrecisionConfig, UnknownNamesListTheChoices) {
  const std::string e = test_support::error_of([] { PrecisionConfig::parse("fp8"); });
  EXPECT_NE(e.find("'fp8'"), std::string::npos);
  EXPECT_NE(e.find("auto|fp32|bf16|fp16|bf16-params|fp16-params"), std::string::npos);
}

TEST(PrecisionConfig, AutoMapsTheMeasuredDtypeToItsAutocastPreset) {
  EXPECT_EQ(PrecisionConfig::for_compute(DType::F32).name(), "fp32");
  EXPECT_EQ(PrecisionConfig::for_compute(DType::F16).name(), "fp16");
  EXPECT_EQ(PrecisionConfig::for_compute(DType::BF16).name(), "bf16");
}

}  // namespace
}  // namespace mixprec::amp
