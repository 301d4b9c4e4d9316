#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

// Every element of t in row-major order, as f64.
std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::F64).contiguous();
  return {d.data<double>(), d.data<double>() + d.numel()};
}

// Warp: a zero flow is the identity bit for bit (bf16 x in, its exact f32 values out); an integer
// flow is a shift with the edge pixel replicated; a half-pixel flow the mean of two neighbours.
TEST(Warp, ZeroIntegerAndHalfPixelFlows) {
  Generator gen(3);
  const Tensor x = Tensor::rand({2, 3, 5, 6}, gen).to(DType::BF16).contiguous(MemoryFormat::ChannelsLast);
  const Tensor out = Tensor::empty({2, 3, 5, 6});
  warp2d(x, Tensor::zeros({2, 2, 5, 6}), out);
  EXPECT_EQ(values(out), values(x));

  Tensor shift = Tensor::zeros({2, 2, 5, 6});
  shift.narrow(1, 0, 1).fill_(2.0);   // read two pixels to the right
  shift.narrow(1, 1, 1).fill_(-1.0);  // and one up
  warp2d(x, shift, out);
  for (int64_t y = 0; y < 5; ++y)
    for (int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(out.value({1, 2, y, c}), x.value({1, 2, std::max<int64_t>(y - 1, 0), std::min<int64_t>(c + 2, 5)}))
          << y << "," << c;

  Tensor half = Tensor::zeros({2, 2, 5, 6});
  half.narrow(1, 0, 1).fill_(0.5);
  warp2d(x, half, out);
  EXPECT_FLOAT_EQ(out.value({0, 1, 2, 3}), 0.5 * (x.value({0, 1, 2, 3}) + x.value({0, 1, 2, 4})));
  EXPECT_EQ(out.value({0, 1, 2, 5}), x.value({0, 1, 2, 5}));  // clamped at the right edge
}

// The adjoint identity <warp(x), g> = <x, warp^T(g)>, in f64, and a NaN flow samples a pixel of
// the frame (no out-of-bounds read) with a zero flow gradient.
TEST(Warp, BackwardIsTheAdjointAndNaNIsSafe) {
  Generator gen(5);
  const Tensor x = Tensor::randn({2, 3, 4, 7}, gen, DType::F64);
  Tensor flow = Tensor::randn({2, 2, 4, 7}, gen, DType::F64).contiguous();
  for (int64_t i = 0; i < flow.numel(); ++i) flow.data<double>()[i] *= 1.5;  // past the edges too
  const Tensor g = Tensor::randn({2, 3, 4, 7}, gen, DType::F64);
  const Tensor out = Tensor::empty({2, 3, 4, 7}, DType::F64);
  warp2d(x, flow, out);
  const Tensor dx = Tensor::zeros({2, 3, 4, 7}, DType::F64);
  const Tensor dflow = Tensor::empty({2, 2, 4, 7}, DType::F64);
  warp2d_backward(g, x, flow, dx, dflow);
  double lhs = 0, rhs = 0;
  const auto o = values(out), gv = values(g), xv = values(x), dxv = values(dx);
  for (std::size_t i = 0; i < o.size(); ++i) {
    lhs += o[i] * gv[i];
    rhs += xv[i] * dxv[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-12 * (1 + std::abs(lhs)));

  Tensor bad = Tensor::zeros({1, 2, 3, 3});
  bad.set({0, 0, 1, 1}, NAN);
  bad.set({0, 1, 2, 2}, INFINITY);
  const Tensor img = Tensor::arange(9).view({1, 1, 3, 3}).to(DType::F32);
  const Tensor sampled = Tensor::empty({1, 1, 3, 3});
  warp2d(img, bad, sampled);
  EXPECT_EQ(sampled.value({0, 0, 1, 1}), 3.0);  // a NaN position across reads column 0
  EXPECT_EQ(sampled.value({0, 0, 2, 2}), 8.0);  // an infinite one down clamps to the last row
  const Tensor d_img = Tensor::zeros({1, 1, 3, 3});
  const Tensor d_bad = Tensor::empty({1, 2, 3, 3});
  warp2d_backward(Tensor::ones({1, 1, 3, 3}), img, bad, d_img, d_bad);
  EXPECT_EQ(d_bad.value({0, 0, 1, 1}), 0.0);
  EXPECT_EQ(d_bad.value({0, 1, 2, 2}), 0.0);
  EXPECT_THROW(warp2d(img, Tensor::zeros({1, 1, 3, 3}), sampled), Error);  // flow needs 2 channels
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
