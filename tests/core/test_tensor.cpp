// Tensor creation, queries, element access, storage sharing and memory accounting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "mixprec/core/allocator.h"
#include "mixprec/core/tensor.h"
#include "support/error_of.h"

namespace mixprec {
namespace {

using ::testing::HasSubstr;

using test_support::error_of;

TEST(Tensor, DefaultIsUndefined) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THAT(error_of([&] { t.data_ptr(); }), HasSubstr("[data_ptr] called on an undefined"));
  EXPECT_THAT(error_of([&] { t.view({1}); }), HasSubstr("[view]"));
  EXPECT_FALSE(t.shares_storage(Tensor()));
}

TEST(Tensor, EmptyQueries) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::BF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::BF16);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.element_size(), 2u);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.stride(-2), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(t.data_ptr(), t.storage()->data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % CachingAllocator::kAlignment, 0u);
}

TEST(Tensor, DimOutOfRangeMessages) {
  const Tensor t = Tensor::empty({2, 3});
  EXPECT_THAT(error_of([&] { t.size(2); }),
              HasSubstr("[size] dim 2 is out of range for a tensor of 2 dims (expected -2..1)"));
  EXPECT_THAT(error_of([&] { t.stride(-3); }), HasSubstr("[stride] dim -3 is out of range"));
  EXPECT_THAT(error_of([&] { Tensor::empty({}).size(0); }), HasSubstr("0-d tensor"));
}

TEST(Tensor, BadShapesThrow) {
  EXPECT_THAT(error_of([] {
                Tensor::empty({2, -1});
              }),
              HasSubstr("[empty] negative dimension -1 in shape [2, -1]"));
  EXPECT_THAT(error_of([] {
                Tensor::empty({int64_t{1} << 40, int64_t{1} << 40});
              }),
              HasSubstr("more elements than int64"));
}

TEST(Tensor, ChannelsLastStrides) {
  const Tensor t = Tensor::empty({2, 3, 4, 5}, DType::F32, MemoryFormat::ChannelsLast);
  EXPECT_EQ(t.strides(), (Strides{60, 1, 15, 3}));
  EXPECT_TRUE(t.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(channels_last_strides({2, 3, 4, 5}), (Strides{60, 1, 15, 3}));
  EXPECT_THAT(error_of([] {
                Tensor::empty({3, 4, 5}, DType::F32, MemoryFormat::ChannelsLast);
              }),
              HasSubstr("[empty] channels_last needs a 4-D NCHW shape, got [3, 4, 5]"));
  // With C == 1 a channels_last tensor is also plain contiguous (size-1 dims are ignored).
  const Tensor c1 = Tensor::empty({2, 1, 4, 5}, DType::F32, MemoryFormat::ChannelsLast);
  EXPECT_TRUE(c1.is_contiguous());
  EXPECT_TRUE(c1.is_contiguous(MemoryFormat::ChannelsLast));
}

TEST(Tensor, ZerosOnesFullArange) {
  const Tensor z = Tensor::zeros({2, 2}, DType::I32);
  const Tensor o = Tensor::ones({3}, DType::F16);
  const Tensor f = Tensor::full({2}, 1.00390625, DType::BF16);  // tie between 1 and 1+2^-7
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(z.data<int32_t>()[i], 0);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(o.data<Half>()[i].bits, 0x3C00);
  EXPECT_EQ(f.at<BFloat16>({1}).bits, 0x3F80);  // RNE: the even neighbour, 1.0
  const Tensor a = Tensor::arange(0.0, 1.0, 0.25);
  EXPECT_EQ(a.shape(), (Shape{4}));
  EXPECT_EQ(a.value({3}), 0.75);
  const Tensor b = Tensor::arange(5, DType::I64);
  EXPECT_EQ(b.at<int64_t>({4}), 4);
  EXPECT_EQ(Tensor::arange(3.0, 0.0, -1.0).value({2}), 1.0);
  EXPECT_EQ(Tensor::arange(0.0, 1.0, 0.3).numel(), 4);  // ceil(1 / 0.3)
  EXPECT_THAT(error_of([] { Tensor::arange(0.0, 5.0, -1.0); }), HasSubstr("[arange] step -1"));
  EXPECT_THAT(error_of([] { Tensor::arange(0.0, 5.0, 0.0); }),
              HasSubstr("[arange] step must be nonzero"));
}

TEST(Tensor, FromVectorAndItem) {
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.at<float>({1, 2}), 6.0f);
  EXPECT_EQ(t.at<float>({-1, -3}), 4.0f);
  const Tensor v = Tensor::from_vector<int32_t>({7, 8});
  EXPECT_EQ(v.shape(), (Shape{2}));
  const Tensor b = Tensor::from_vector<bool>({true, false, true});
  EXPECT_EQ(b.dtype(), DType::Bool);
  EXPECT_TRUE(b.at<bool>({2}));
  EXPECT_FALSE(b.at<bool>({1}));
  EXPECT_THAT(error_of([] {
                Tensor::from_vector<float>({1, 2, 3}, {2, 2});
              }),
              HasSubstr("[from_vector] 3 values cannot fill shape [2, 2] (4 elements)"));

  const Tensor s = Tensor::scalar(2.5, DType::BF16);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<float>(), 2.5f);
  EXPECT_EQ(s.item<double>(), 2.5);
  EXPECT_EQ(s.item<int32_t>(), 2);  // converts, truncating toward zero
  EXPECT_EQ(Tensor::from_vector<double>({-3.75}).item<float>(), -3.75f);
  EXPECT_THAT(
      error_of([&] { t.item<float>(); }),
      HasSubstr("[item] expected a tensor with one element, got shape [2, 3] (6 elements)"));
}

TEST(Tensor, AtChecksDtypeAndBounds) {
  const Tensor t = Tensor::zeros({2, 3});
  EXPECT_THAT(error_of([&] {
                t.at<double>({0, 0});
              }),
              HasSubstr("[at] requested a f64 element from a tensor of dtype f32"));
  EXPECT_THAT(error_of([&] {
                t.at<float>({0, 3});
              }),
              HasSubstr("[at] index 3 is out of range for dim 1 of size 3 (shape [2, 3])"));
  EXPECT_THAT(error_of([&] { t.at<float>({0}); }),
              HasSubstr("[at] expected 2 indices for a tensor of shape [2, 3], got [0]"));
  EXPECT_THAT(error_of([&] { t.data<int32_t>(); }),
              HasSubstr("[data] requested i32 elements from a tensor of dtype f32"));
  EXPECT_THAT(error_of([&] { t.value({-3, 0}); }), HasSubstr("[value] index -3"));
}

TEST(Tensor, ValueAndSetRoundToNearestEven) {
  const Tensor h = Tensor::zeros({4}, DType::F16);
  h.set({0}, 65520.0);                  // halfway past f16 max: rounds to inf
  h.set({1}, 65504.0);                  // max
  h.set({2}, 1.0 + 0x1p-11);            // tie: to even (1.0)
  h.set({3}, 1.0 + 0x1p-11 + 0x1p-30);  // just above the tie: up
  EXPECT_EQ(h.at<Half>({0}).bits, 0x7C00);
  EXPECT_EQ(h.at<Half>({1}).bits, 0x7BFF);
  EXPECT_EQ(h.at<Half>({2}).bits, 0x3C00);
  EXPECT_EQ(h.at<Half>({3}).bits, 0x3C01);
  EXPECT_EQ(h.value({1}), 65504.0);

  const Tensor b = Tensor::zeros({2}, DType::BF16);
  b.set({0}, 1.01171875);  // 1 + 3 * 2^-8: tie between 1+2^-7 and 1+2^-6, even is up
  b.set({-1}, -0.0);
  EXPECT_EQ(b.at<BFloat16>({0}).bits, 0x3F82);
  EXPECT_EQ(b.at<BFloat16>({1}).bits, 0x8000);

  const Tensor i = Tensor::zeros({1}, DType::I32);
  i.set({0}, -7.9);
  EXPECT_EQ(i.at<int32_t>({0}), -7);
  const std::vector<int64_t> index{0};
  EXPECT_EQ(i.value(std::span<const int64_t>(index)), -7.0);
}

TEST(Tensor, CopiesShareStorageCloneDoesNot) {
  const Tensor a = Tensor::zeros({3});
  Tensor b = a;  // NOLINT: the copy is the point
  b.set({1}, 5.0);
  EXPECT_EQ(a.value({1}), 5.0);
  EXPECT_TRUE(a.shares_storage(b));
  const Tensor c = a.clone();
  EXPECT_FALSE(c.shares_storage(a));
  c.set({1}, 9.0);
  EXPECT_EQ(a.value({1}), 5.0);
  EXPECT_EQ(c.value({1}), 9.0);
}

TEST(Tensor, EmptyTensorsHaveNoData) {
  const Tensor t = Tensor::empty({0, 4});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_EQ(t.data_ptr(), nullptr);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.clone().numel(), 0);
  EXPECT_EQ(t.to(DType::BF16).numel(), 0);
}

TEST(Tensor, MemoryReturnsToTheAllocator) {
  auto& alloc = CachingAllocator::global();
  const MemoryStats before = alloc.stats();
  {
    const Tensor a = Tensor::ones({256, 256}, DType::F32);  // 256 KiB
    const MemoryStats during = alloc.stats();
    EXPECT_GE(during.allocated_bytes, before.allocated_bytes + a.nbytes());
    EXPECT_GE(during.requested_bytes, before.requested_bytes + a.nbytes());
    const Tensor view = a.transpose(0, 1).slice(0, 1, 100);  // no new memory
    EXPECT_EQ(alloc.stats().allocated_bytes, during.allocated_bytes);
    const Tensor copies = view.contiguous().to(DType::BF16).clone();
    const Tensor r = Tensor::randn({1000}, DType::BF16);
    EXPECT_GT(alloc.stats().allocated_bytes, during.allocated_bytes);
  }
  EXPECT_EQ(alloc.stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(alloc.stats().num_allocs - before.num_allocs,
            alloc.stats().num_frees - before.num_frees);
}

TEST(Tensor, ViewsKeepStorageAliveAfterTheBaseDies) {
  auto& alloc = CachingAllocator::global();
  const std::size_t before = alloc.stats().allocated_bytes;
  Tensor row;
  {
    const Tensor base = Tensor::arange(12.0).view({3, 4});
    row = base.select(0, 2);
  }
  EXPECT_GT(alloc.stats().allocated_bytes, before);
  EXPECT_EQ(row.value({3}), 11.0);
  row = Tensor();
  EXPECT_EQ(alloc.stats().allocated_bytes, before);
}

TEST(Shape, Helpers) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({3, 5}), "[3, 5]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 0, 3}), 0);
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({2, 0, 4}), (Strides{4, 4, 1}));
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}), (Shape{3, 4, 5}));
  EXPECT_THAT(error_of([] { broadcast_shapes({3}, {4}, "add"); }),
              HasSubstr("[add] shapes [3] and [4] cannot be broadcast"));
  EXPECT_TRUE(is_non_overlapping_and_dense({3, 4}, {1, 3}));
  EXPECT_FALSE(is_non_overlapping_and_dense({3, 4}, {8, 2}));
  EXPECT_FALSE(is_non_overlapping_and_dense({3, 4}, {0, 1}));
  EXPECT_EQ(memory_format_name(MemoryFormat::ChannelsLast), "channels_last");
}

// Tensor::from_blob, the Python bindings' zero-copy import: memory owned elsewhere, kept alive
// by `owner` until the last tensor on it is gone, and outside the caching allocator.
TEST(Tensor, FromBlobBorrowsWithoutCopyAndReleasesTheOwner) {
  std::vector<float> memory = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  bool released = false;
  auto owner = std::shared_ptr<void>(nullptr, [&released](void*) { released = true; });
  const MemoryStats before = CachingAllocator::global().stats();
  Tensor view;
  {
    Tensor t = Tensor::from_blob(memory.data(), {3, 2}, {4, 2}, DType::F32, std::move(owner));
    EXPECT_EQ(t.data_ptr(), memory.data());
    EXPECT_TRUE(t.storage()->is_borrowed());
    EXPECT_EQ(t.storage()->nbytes(), 11 * sizeof(float));  // elements 0 to 2 * 4 + 1 * 2
    EXPECT_EQ(t.value({2, 1}), 10.0);
    t.set({1, 0}, -1.0);
    EXPECT_EQ(memory[4], -1.0f);  // writes reach the borrowed memory
    view = t.select(1, 1);
  }
  EXPECT_EQ(CachingAllocator::global().stats().allocated_bytes, before.allocated_bytes);
  EXPECT_FALSE(released);  // the view still uses the memory
  EXPECT_EQ(view.value({2}), 10.0);
  view = Tensor();
  EXPECT_TRUE(released);
}

TEST(Tensor, FromBlobChecksItsGeometry) {
  float x[4] = {};
  EXPECT_THAT(error_of([&] {
                Tensor::from_blob(x, {2, 2}, {-2, 1}, DType::F32, nullptr);
              }),
              HasSubstr("[from_blob] negative stride -2 in dim 0"));
  EXPECT_THAT(error_of([&] {
                Tensor::from_blob(x, {2, 2}, {1}, DType::F32, nullptr);
              }),
              HasSubstr("[from_blob] 1 strides for shape [2, 2]"));
  EXPECT_THAT(error_of([&] { Tensor::from_blob(nullptr, {2}, {1}, DType::F32, nullptr); }),
              HasSubstr("[from_blob] null data"));
  // Views are bounds-checked against the borrowed extent, as against an allocation.
  const Tensor t = Tensor::from_blob(x, {4}, {1}, DType::F32, nullptr);
  EXPECT_THAT(error_of([&] { t.as_strided({5}, {1}, 0); }), HasSubstr("beyond the storage's 4"));
  EXPECT_EQ(Tensor::from_blob(nullptr, {0, 3}, {3, 1}, DType::F32, nullptr).numel(), 0);
}

// A channel slice of a channels_last tensor (a convolution writes one in place of a copy into a
// concatenation): its pixel stride is the parent's channel count. Anything else gives 0,
// including a contiguous [N, C, 1, 1], which is channels_last-dense but has stride(3) 1.
TEST(Shape, ChannelSlicePixelStride) {
  const Tensor whole = Tensor::empty({2, 96, 4, 5}, DType::F32, MemoryFormat::ChannelsLast);
  EXPECT_EQ(channel_slice_pixel_stride(whole.shape(), whole.strides()), 96);
  const Tensor slice = whole.slice(1, 32, 96);
  EXPECT_EQ(channel_slice_pixel_stride(slice.shape(), slice.strides()), 96);
  const Tensor nchw = Tensor::empty({2, 96, 4, 5});
  EXPECT_EQ(channel_slice_pixel_stride(nchw.shape(), nchw.strides()), 0);
  const Tensor one_pixel = Tensor::empty({2, 8, 1, 1});
  EXPECT_TRUE(one_pixel.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(channel_slice_pixel_stride(one_pixel.shape(), one_pixel.strides()), 0);
  EXPECT_EQ(channel_slice_pixel_stride({2, 3}, {3, 1}), 0);
}

}  // namespace
}  // namespace mixprec
