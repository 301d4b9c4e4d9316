#include <gtest/gtest.h>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/error.h"
#include "mixprec/core/precision.h"

namespace mixprec {
namespace {

TEST(CpuFeatures, LevelsAreNestedAndScalarAlwaysWorks) {
  EXPECT_TRUE(isa_supported(IsaLevel::Scalar));
  bool lower = true;
  for (IsaLevel level : kAllIsaLevels) {
    if (isa_supported(level)) {
      EXPECT_TRUE(lower) << isa_name(level) << " without the level below";
    }
    lower = isa_supported(level);
  }
  EXPECT_TRUE(isa_supported(best_isa()));
}

TEST(CpuFeatures, NamesRoundTrip) {
  for (IsaLevel level : kAllIsaLevels) EXPECT_EQ(parse_isa(isa_name(level)), level);
  EXPECT_THROW(parse_isa("sse2"), Error);
}

TEST(CpuFeatures, ScopedIsaRestoresAndRejectsUnsupported) {
  const IsaLevel before = active_isa();
  {
    ScopedIsa scalar(IsaLevel::Scalar);
    EXPECT_EQ(active_isa(), IsaLevel::Scalar);
  }
  EXPECT_EQ(active_isa(), before);
  for (IsaLevel level : kAllIsaLevels)
    if (!isa_supported(level)) {
      EXPECT_THROW(ScopedIsa{level}, Error);
    }
  EXPECT_EQ(active_isa(), before);
}

TEST(Dispatch, ScopedDispatchRestoresEverySwitch) {
  const DispatchConfig before = dispatch_config();
  {
    ScopedDispatch scope({IsaLevel::Scalar, Bf16ConvCompute::WidenToF32, false});
    EXPECT_EQ(active_isa(), IsaLevel::Scalar);
    EXPECT_EQ(dispatch_config().bf16_conv, Bf16ConvCompute::WidenToF32);
    EXPECT_FALSE(dispatch_config().pack_inference_weights);
    {
      ScopedIsa inner(before.level);  // changes the level only
      EXPECT_EQ(dispatch_config().bf16_conv, Bf16ConvCompute::WidenToF32);
    }
    EXPECT_EQ(active_isa(), IsaLevel::Scalar);
  }
  const DispatchConfig after = dispatch_config();
  EXPECT_EQ(after.level, before.level);
  EXPECT_EQ(after.bf16_conv, before.bf16_conv);
  EXPECT_EQ(after.pack_inference_weights, before.pack_inference_weights);
  EXPECT_EQ(bf16_conv_compute_name(Bf16ConvCompute::DotProduct), "dot");
}

TEST(Dispatch, AmxIsALevelAboveAvx512Bf16) {
  EXPECT_EQ(parse_isa("amx"), IsaLevel::Amx);
  EXPECT_GT(IsaLevel::Amx, IsaLevel::Avx512Bf16);
  const CpuFeatures& f = cpu_features();
  if (!(f.amx_tile && f.amx_bf16 && f.os_amx)) {
    EXPECT_FALSE(isa_supported(IsaLevel::Amx));
  }
}

TEST(CpuFeatures, IsaTableFallsBackToTheLevelBelow) {
  using Fn = int();
  IsaTable<Fn> table;
  table.variants[0] = [] { return 0; };
  table.variants[2] = [] { return 2; };
  EXPECT_EQ(table.at(IsaLevel::Scalar)(), 0);
  EXPECT_EQ(table.at(IsaLevel::Avx2)(), 0);
  EXPECT_EQ(table.at(IsaLevel::Avx512)(), 2);
  EXPECT_EQ(table.at(IsaLevel::Avx512Bf16)(), 2);
}

TEST(Precision, RecommendationFollowsFeatures) {
  CpuFeatures f;
  EXPECT_EQ(recommended_precision(f).dtype, DType::F32);
  f.os_avx = f.f16c = true;
  EXPECT_EQ(recommended_precision(f).dtype, DType::F16);
  f.avx512_bf16 = true;
  EXPECT_EQ(recommended_precision(f).dtype, DType::F16) << "no OS AVX-512 state: not usable";
  f.os_avx512 = true;
  EXPECT_EQ(recommended_precision(f).dtype, DType::BF16);
  CpuFeatures amx;
  amx.os_amx = amx.amx_bf16 = true;
  EXPECT_EQ(recommended_precision(amx).dtype, DType::BF16);
  EXPECT_FALSE(recommended_precision(amx).reason.empty());
}

}  // namespace
}  // namespace mixprec
