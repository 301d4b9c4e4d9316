#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/resample.h"

namespace mixprec::kernels {
namespace {

TEST(Resample, AvgPoolMatchesHandValues) {
  const Tensor x = Tensor::arange(16).view({1, 1, 4, 4});
  const Tensor out = Tensor::empty({1, 1, 2, 2});
  avg_pool2d(x, out);
  EXPECT_EQ(out.value({0, 0, 0, 0}), (0 + 1 + 4 + 5) / 4.0);
  EXPECT_EQ(out.value({0, 0, 1, 1}), (10 + 11 + 14 + 15) / 4.0);
  // Padding: count_include_pad divides by the full window, otherwise by the cells inside.
  const Tensor padded = Tensor::empty({1, 1, 3, 3});
  Pool2dOptions o{
      .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  avg_pool2d(x, padded, o);
  EXPECT_EQ(padded.value({0, 0, 0, 0}), 0.0 / 4);
  o.count_include_pad = false;
  avg_pool2d(x, padded, o);
  EXPECT_EQ(padded.value({0, 0, 0, 1}), (1 + 2) / 2.0);
}

TEST(Resample, MaxPoolValuesIndicesAndNaN) {
  Tensor x = Tensor::arange(16).view({1, 1, 4, 4}).clone();
  x.set({0, 0, 0, 0}, 100.0);
  const Tensor out = Tensor::empty({1, 1, 2, 2});
  const Tensor idx = Tensor::empty({1, 1, 2, 2}, DType::I64);
  max_pool2d(x, out, {}, &idx);
  EXPECT_EQ(out.value({0, 0, 0, 0}), 100.0);
  EXPECT_EQ(idx.value({0, 0, 0, 0}), 0.0);
  EXPECT_EQ(out.value({0, 0, 1, 0}), 13.0);
  EXPECT_EQ(idx.value({0, 0, 1, 0}), 13.0);
  x.set({0, 0, 3, 3}, NAN);
  max_pool2d(x, out);
  EXPECT_TRUE(std::isnan(out.value({0, 0, 1, 1})));
}

TEST(Resample, LayoutsAndDtypesAgree) {
  Generator gen(5);
  const Tensor x = Tensor::randn({2, 5, 9, 7}, gen);
  // channels_last runs pixel by pixel over channel runs, NCHW channel by channel: same bits,
  // also into another dtype and at a scale that is not 2.
  for (UpsampleMode mode : {UpsampleMode::Bilinear, UpsampleMode::Nearest})
    for (DType t : {DType::F32, DType::BF16, DType::F16})
      for (const Shape& size : {Shape{18, 14}, Shape{20, 11}}) {
        const Tensor xt = x.to(t);
        const DType out_t = t == DType::F16 ? DType::BF16 : t;
        const Tensor a = Tensor::empty({2, 5, size[0], size[1]}, out_t),
                     b = Tensor::empty({2, 5, size[0], size[1]}, out_t, MemoryFormat::ChannelsLast);
        upsample2d(xt, a, mode);
        upsample2d(xt.to(MemoryFormat::ChannelsLast), b, mode);
        for (int64_t n = 0; n < 2; ++n)
          for (int64_t c = 0; c < 5; ++c)
            for (int64_t i = 0; i < size[0]; ++i)
              for (int64_t j = 0; j < size[1]; ++j)
                ASSERT_EQ(a.value({n, c, i, j}), b.value({n, c, i, j}))
                    << "mode " << int(mode) << " " << dtype_name(t) << " at " << n << c << i << j;
      }
}

TEST(Resample, UpsampleTwoTimesMatchesPyTorchRules) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor near = Tensor::empty({1, 1, 4, 4}), bil = Tensor::empty({1, 1, 4, 4});
  upsample2d(x, near, UpsampleMode::Nearest);
  EXPECT_EQ(near.value({0, 0, 1, 1}), 1.0);
  EXPECT_EQ(near.value({0, 0, 2, 3}), 4.0);
  upsample2d(x, bil, UpsampleMode::Bilinear);
  // torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear") of [[1, 2], [3, 4]]:
  // row 0 = [1, 1.25, 1.75, 2], row 1 = [1.5, 1.75, 2.25, 2.5].
  const double row0[] = {1, 1.25, 1.75, 2}, row1[] = {1.5, 1.75, 2.25, 2.5};
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_DOUBLE_EQ(bil.value({0, 0, 0, j}), row0[j]);
    EXPECT_DOUBLE_EQ(bil.value({0, 0, 1, j}), row1[j]);
  }
}

TEST(Resample, ClearErrors) {
  EXPECT_THROW(avg_pool2d(Tensor::zeros({1, 1, 4, 4}), Tensor::empty({1, 1, 3, 3})), Error);
  EXPECT_THROW(
      upsample2d(Tensor::zeros({1, 2, 4, 4}), Tensor::empty({1, 3, 8, 8}), UpsampleMode::Nearest),
      Error);
  try {
    max_pool2d(Tensor::zeros({1, 1, 4, 4}, DType::I32), Tensor::empty({1, 1, 2, 2}, DType::I32));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[max_pool2d] expected f32, bf16, f16 or f64, got i32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixprec::kernels
