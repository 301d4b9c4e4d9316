// Printing: exact strings for small tensors, summarisation for large ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "mixprec/core/tensor.h"

namespace mixprec {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(TensorPrint, SmallTensorsExactly) {
  EXPECT_EQ(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::BF16).to_string(),
            "tensor([[1.0000, 2.0000], [3.0000, 4.0000]], dtype=bf16)");
  EXPECT_EQ(Tensor::from_vector<float>({-1.5f, 2.0f}).to_string(),
            "tensor([-1.5000,  2.0000], dtype=f32)");
  EXPECT_EQ(Tensor::scalar(3.25).to_string(), "tensor(3.2500, dtype=f32)");
  EXPECT_EQ(Tensor::arange(5, DType::I64).to_string(), "tensor([0, 1, 2, 3, 4], dtype=i64)");
  EXPECT_EQ(Tensor::from_vector<int32_t>({-10, 5}).to_string(), "tensor([-10,   5], dtype=i32)");
  EXPECT_EQ(Tensor::from_vector<bool>({true, false}).to_string(),
            "tensor([ True, False], dtype=bool)");
  EXPECT_EQ(Tensor::from_vector<float>({NAN, INFINITY, -INFINITY, 0.5f}).to_string(),
            "tensor([   nan,    inf,   -inf, 0.5000], dtype=f32)");
  EXPECT_EQ(Tensor::from_vector<double>({1e-5, 1.0}).to_string(),
            "tensor([1.0000e-05, 1.0000e+00], dtype=f64)");
  EXPECT_EQ(Tensor::empty({0}).to_string(), "tensor([], dtype=f32)");
  EXPECT_EQ(Tensor::empty({0, 3}, DType::F16).to_string(), "tensor([], shape=[0, 3], dtype=f16)");
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");
}

TEST(TensorPrint, StridedViewsPrintLogicalOrder) {
  const Tensor t = Tensor::arange(6.0, DType::I32).view({2, 3});
  EXPECT_EQ(t.t().to_string(), "tensor([[0, 3], [1, 4], [2, 5]], dtype=i32)");
  EXPECT_EQ(t.select(1, 1).to_string(), "tensor([1, 4], dtype=i32)");
}

TEST(TensorPrint, WideTensorsGoOneRowPerLine) {
  const Tensor t = Tensor::arange(24.0).view({2, 3, 4});
  EXPECT_EQ(t.to_string(),
            "tensor([[[ 0.0000,  1.0000,  2.0000,  3.0000],\n"
            "         [ 4.0000,  5.0000,  6.0000,  7.0000],\n"
            "         [ 8.0000,  9.0000, 10.0000, 11.0000]],\n"
            "\n"
            "        [[12.0000, 13.0000, 14.0000, 15.0000],\n"
            "         [16.0000, 17.0000, 18.0000, 19.0000],\n"
            "         [20.0000, 21.0000, 22.0000, 23.0000]]], dtype=f32)");
}

TEST(TensorPrint, LongVectorsWrap) {
  const std::string s = Tensor::arange(20.0).to_string();
  EXPECT_THAT(s, StartsWith("tensor([ 0.0000,  1.0000,"));
  EXPECT_THAT(s, HasSubstr(",\n        "));
  std::istringstream lines(s);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
}

TEST(TensorPrint, LargeTensorsAreSummarised) {
  const std::string v = Tensor::arange(2000.0).to_string();
  EXPECT_EQ(v,
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
            "        1.9990e+03], shape=[2000], dtype=f32)");
  const std::string m = Tensor::arange(1200.0, DType::I32).view({40, 30}).to_string();
  EXPECT_THAT(m, StartsWith("tensor([[   0,    1,    2,  ...,   27,   28,   29],\n"
                            "        [  30,   31,   32,  ...,   57,   58,   59],\n"));
  EXPECT_THAT(m, HasSubstr("        ...,\n"));
  EXPECT_THAT(m,
              EndsWith("[1170, 1171, 1172,  ..., 1197, 1198, 1199]], shape=[40, 30], dtype=i32)"));
}

TEST(TensorPrint, StreamOperator) {
  std::ostringstream out;
  out << Tensor::ones({2}, DType::F16);
  EXPECT_EQ(out.str(), "tensor([1.0000, 1.0000], dtype=f16)");
}

}  // namespace
}  // namespace mixprec
