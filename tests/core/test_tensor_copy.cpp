// Copies and conversion: contiguous, to(DType), to(MemoryFormat), copy_, clone, fill_.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/tensor.h"
#include "support/error_of.h"
#include "support/isa_levels.h"

namespace mixprec {
namespace {

using ::testing::HasSubstr;

using test_support::error_of;

Tensor iota(const Shape& shape, DType dtype = DType::F32) {
  return Tensor::arange(static_cast<double>(shape_numel(shape)), dtype).view(shape);
}

// Every element of `t` in row-major logical order, as doubles (through value()).
std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  std::vector<int64_t> index(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    out.push_back(t.value(std::span<const int64_t>(index)));
    for (int64_t d = t.dim() - 1; d >= 0 && ++index[d] == t.size(d); --d) index[d] = 0;
  }
  return out;
}

TEST(TensorCopy, ContiguousOfATransposeReordersValues) {
  const Tensor t = iota({3, 4});
  EXPECT_TRUE(t.contiguous().shares_storage(t));  // already contiguous: no copy
  const Tensor c = t.t().contiguous();
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(values_of(c), values_of(t.t()));
  EXPECT_EQ(c.data<float>()[1], 4.0f);  // c[0, 1] = t[1, 0]
}

TEST(TensorCopy, ChannelsLastRoundTrip) {
  const Tensor x = iota({2, 3, 4, 5});
  const Tensor cl = x.to(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.strides(), (Strides{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(values_of(cl), values_of(x));
  // In memory: element (n, c, h, w) sits at n*60 + h*15 + w*3 + c.
  EXPECT_EQ(cl.data<float>()[1 * 60 + 2 * 15 + 3 * 3 + 1], x.value({1, 1, 2, 3}));
  EXPECT_TRUE(cl.to(MemoryFormat::ChannelsLast).shares_storage(cl));
  const Tensor back = cl.contiguous();
  EXPECT_EQ(back.strides(), (Strides{60, 20, 5, 1}));
  EXPECT_EQ(std::memcmp(back.data_ptr(), x.data_ptr(), x.nbytes()), 0);
  // Layout-preserving copies keep channels_last.
  EXPECT_EQ(cl.clone().strides(), cl.strides());
  EXPECT_EQ(cl.to(DType::BF16).strides(), cl.strides());
  EXPECT_EQ(cl.clone(MemoryFormat::Contiguous).strides(), back.strides());
  EXPECT_THAT(error_of([&] {
                iota({2, 3}).to(MemoryFormat::ChannelsLast);
              }),
              HasSubstr("channels_last needs a 4-D NCHW shape, got [2, 3]"));
}

// Values where rounding to 16 bits is easy to get wrong: ties both ways, overflow at the
// edge, subnormals, signed zero, NaN payloads.
std::vector<float> hard_floats() {
  const auto f = [](uint32_t bits) { return std::bit_cast<float>(bits); };
  // Grouped by what each value tests.
  // clang-format off
  return {
      1.0f,
      f(0x3F808000u),   // 1 + 2^-8: bf16 tie, even is 1.0
      f(0x3F818000u),   // 1 + 3*2^-8: bf16 tie, even is up
      f(0x3F808001u),   // just above a bf16 tie: up
      1.0f + 0x1p-11f,  // f16 tie
      // f16 max, the last value below its inf threshold, the threshold itself (inf)
      65504.0f, 65519.0f, 65520.0f,
      std::numeric_limits<float>::max(),  // bf16 rounds up to inf
      f(0x7F7F7FFFu),                     // just below the bf16 inf threshold
      -0.0f,
      // f16: smallest subnormal, a tie that goes to 0, just above that tie
      0x1p-24f, 0x1p-25f, 0x1.8p-25f,
      // f32 subnormals: bf16 keeps them
      1e-40f, -1e-45f,
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      // quiet and signalling NaNs with payloads
      f(0x7FC00001u), f(0x7F800001u), f(0xFFA12345u),
      3.14159265f, -2.71828183f, 1e-3f, 6.0e4f};
  // clang-format on
}

// Once per kernel level; a level this CPU lacks is reported skipped (support/isa_levels.h).
class TensorCopyIsaTest : public test_support::IsaTest {};

TEST_P(TensorCopyIsaTest, ToDTypeMatchesScalarRules) {
  const std::vector<float> values = hard_floats();
  const Tensor x = Tensor::from_vector(values);
  const Tensor bf = x.to(DType::BF16);
  const Tensor h = x.to(DType::F16);
  const Tensor bf_back = bf.to(DType::F32);
  const Tensor h_back = h.to(DType::F32);
  for (std::size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE(i);
    const uint16_t bf_bits = fp16_bits::f32_to_bf16(values[i]);
    const uint16_t h_bits = fp16_bits::f32_to_f16(values[i]);
    EXPECT_EQ(bf.data<BFloat16>()[i].bits, bf_bits);
    EXPECT_EQ(h.data<Half>()[i].bits, h_bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(bf_back.data<float>()[i]),
              std::bit_cast<uint32_t>(fp16_bits::bf16_to_f32(bf_bits)));
    EXPECT_EQ(std::bit_cast<uint32_t>(h_back.data<float>()[i]),
              std::bit_cast<uint32_t>(fp16_bits::f16_to_f32(h_bits)));
  }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(TensorCopyIsaTest);

TEST(TensorCopy, ToSameDTypeIsTheSameTensor) {
  const Tensor x = iota({2, 3}).t();
  const Tensor y = x.to(DType::F32);
  EXPECT_TRUE(y.shares_storage(x));
  EXPECT_EQ(y.strides(), x.strides());
  const Tensor z = x.to(DType::F64);  // a dense transpose keeps its strides
  EXPECT_EQ(z.strides(), x.strides());
  EXPECT_EQ(values_of(z), values_of(x));
  const Tensor sliced = iota({4, 4}).slice(1, 0, 4, 2);  // not dense: becomes contiguous
  EXPECT_TRUE(sliced.to(DType::BF16).is_contiguous());
  EXPECT_EQ(values_of(sliced.to(DType::BF16)), values_of(sliced));
}

TEST(TensorCopy, ToIntegerTruncatesAndSaturates) {
  const Tensor x = Tensor::from_vector<float>({-1.75f, 2.5f, 3e9f, NAN});
  const Tensor i = x.to(DType::I32);
  EXPECT_EQ(i.at<int32_t>({0}), -1);
  EXPECT_EQ(i.at<int32_t>({1}), 2);
  EXPECT_EQ(i.at<int32_t>({2}), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i.at<int32_t>({3}), 0);
  const Tensor b = x.to(DType::Bool);
  EXPECT_TRUE(b.at<bool>({3}));  // NaN != 0
}

TEST(TensorCopy, CopyBroadcastsAndConverts) {
  const Tensor dst = Tensor::zeros({2, 3, 4}, DType::BF16);
  const Tensor row = Tensor::from_vector<double>({0.5, 1.5, 2.5, 1.00390625});  // [4], f64
  dst.copy_(row);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(dst.value({i, j, 2}), 2.5);
      EXPECT_EQ(dst.value({i, j, 3}), 1.0);  // f64 tie rounds once, to even
    }
  const Tensor col = Tensor::from_vector<int32_t>({7, 8, 9}, {3, 1});  // [3, 1] i32
  dst.copy_(col);
  EXPECT_EQ(dst.value({1, 2, 0}), 9.0);
  EXPECT_EQ(dst.value({0, 0, 3}), 7.0);
  dst.copy_(Tensor::scalar(-4.0, DType::F16));
  EXPECT_EQ(values_of(dst), std::vector<double>(24, -4.0));
  EXPECT_THAT(
      error_of([&] { dst.copy_(Tensor::zeros({3})); }),
      HasSubstr("[copy_] source shape [3] cannot be broadcast to the destination shape [2, 3, 4]"));
  EXPECT_THAT(error_of([&] {
                Tensor::zeros({4}).copy_(Tensor::zeros({2, 4}));
              }),
              HasSubstr("[copy_] source shape [2, 4] cannot be broadcast"));
  EXPECT_THAT(error_of([&] { dst.copy_(Tensor()); }),
              HasSubstr("[copy_] the source tensor is undefined"));
}

TEST(TensorCopy, CopyIntoStridedDestination) {
  const Tensor base = Tensor::zeros({4, 6}, DType::F16);
  const Tensor dst = base.t().slice(0, 1, 6, 2);  // [3, 4] strides [2, 6], offset 1
  dst.copy_(iota({3, 4}, DType::F64));
  EXPECT_EQ(dst.value({2, 3}), 11.0);
  EXPECT_EQ(base.value({3, 5}), 11.0);  // dst[2, 3] = base[3, 1 + 2*2]
  EXPECT_EQ(base.value({0, 0}), 0.0);   // untouched column
  EXPECT_EQ(base.value({1, 2}), 0.0);
  EXPECT_THAT(error_of([&] {
                Tensor::zeros({3, 1}).expand({3, 4}).copy_(iota({3, 4}));
              }),
              HasSubstr("stride 0 at dim 1 makes several elements share one memory location"));
}

TEST(TensorCopy, OverlappingCopyReadsBeforeWriting) {
  const Tensor t = iota({10});
  t.slice(0, 1).copy_(t.slice(0, 0, 9));  // shift right by one, like memmove
  EXPECT_EQ(values_of(t), (std::vector<double>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  const Tensor m = iota({3, 3});
  m.copy_(m.t());  // in-place transpose through a copy
  EXPECT_EQ(values_of(m), (std::vector<double>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  m.copy_(m);  // self copy: nothing to do
  EXPECT_EQ(m.value({0, 1}), 3.0);
}

TEST(TensorCopy, LargePermutedCopyMatchesElementwise) {
  // Big enough to take the parallel path, with a non-trivial dim order on both sides.
  const Tensor src = Tensor::rand({37, 33, 65}, DType::F32).permute({2, 0, 1});    // [65, 37, 33]
  const Tensor dst = Tensor::empty({33, 65, 37}, DType::BF16).permute({1, 2, 0});  // [65, 37, 33]
  dst.copy_(src);
  for (int64_t i = 0; i < 65; i += 7)
    for (int64_t j = 0; j < 37; j += 5)
      for (int64_t k = 0; k < 33; k += 3)
        ASSERT_EQ(dst.at<BFloat16>({i, j, k}).bits,
                  fp16_bits::f32_to_bf16(src.at<float>({i, j, k})));
  const Tensor back = dst.contiguous().to(DType::F32);
  EXPECT_EQ(values_of(back), values_of(dst));
}

// Transposing copies go block by block; check every element size, with sizes that leave
// partial blocks on both edges, for plain moves and conversions.
TEST(TensorCopy, TransposingCopiesEveryElementSize) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::I32, DType::U8, DType::Bool}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = Tensor::arange(5.0 * 67 * 45, DType::I32).to(dtype).view({5, 67, 45});
    const Tensor p = x.permute({0, 2, 1});
    const Tensor same = p.contiguous();
    const Tensor converted = p.contiguous().to(DType::F64);
    const Tensor direct = Tensor::empty({5, 45, 67}, DType::F64).copy_(p);
    ASSERT_EQ(values_of(same), values_of(p));
    ASSERT_EQ(values_of(direct), values_of(p));
    ASSERT_EQ(values_of(converted), values_of(p));
  }
}

TEST(TensorCopy, CloneIsDeepAndPreservesDenseLayouts) {
  const Tensor t = iota({3, 4}).t();
  const Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_EQ(c.strides(), t.strides());  // dense transpose kept as is (PyTorch's preserve)
  EXPECT_EQ(values_of(c), values_of(t));
  const Tensor e = iota({3, 1}).expand({3, 4}).clone();  // not dense: materialised
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.value({2, 3}), 2.0);
  const Tensor s = iota({4, 6}).slice(1, 1, 5).clone();
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.storage_offset(), 0);
  EXPECT_EQ(s.value({3, 0}), 19.0);
}

TEST(TensorCopy, FillAndZeroTouchOnlyTheView) {
  const Tensor t = Tensor::ones({4, 4}, DType::I64);
  t.slice(1, 1, 3).zero_();  // strided: via fill_
  t.select(0, 3).fill_(9.0);
  EXPECT_EQ(values_of(t), (std::vector<double>{1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 9, 9, 9, 9}));
  t.zero_();  // dense: memset
  EXPECT_EQ(values_of(t), std::vector<double>(16, 0.0));
  const Tensor h = Tensor::full({2}, 1e6, DType::F16);
  EXPECT_TRUE(std::isinf(h.value({0})));
}

}  // namespace
}  // namespace mixprec
