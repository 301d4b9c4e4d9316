// Views: strides against hand-derived values, storage sharing, and error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mixprec/core/tensor.h"
#include "support/error_of.h"

namespace mixprec {
namespace {

using ::testing::HasSubstr;

using test_support::error_of;

// [0, 1, ..., n-1] in the given shape, f32.
Tensor iota(const Shape& shape) {
  return Tensor::arange(static_cast<double>(shape_numel(shape))).view(shape);
}

void expect_geometry(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  EXPECT_EQ(t.shape(), shape);
  EXPECT_EQ(t.strides(), strides);
  EXPECT_EQ(t.storage_offset(), offset);
}

TEST(TensorViews, SliceStridesAndBounds) {
  const Tensor t = iota({4, 6});  // strides [6, 1]
  expect_geometry(t.slice(1, 1, 5, 2), {4, 2}, {6, 2}, 1);
  expect_geometry(t.slice(0, -3), {3, 6}, {6, 1}, 6);         // from row 1
  expect_geometry(t.slice(0, 1, -1), {2, 6}, {6, 1}, 6);      // rows 1..2
  expect_geometry(t.slice(1, -100, 100), {4, 6}, {6, 1}, 0);  // clamped to the dim
  expect_geometry(t.slice(1, 5, 2), {4, 0}, {6, 1}, 0);       // empty, not an error
  expect_geometry(t.slice(-1, 0, 6, 4), {4, 2}, {6, 4}, 0);   // ceil(6 / 4) = 2
  EXPECT_EQ(t.slice(1, 1, 5, 2).value({2, 1}), 15.0);         // row 2, col 3
  EXPECT_THAT(error_of([&] { t.slice(1, 0, 6, 0); }),
              HasSubstr("[slice] step must be positive, got 0"));
  EXPECT_THAT(error_of([&] { t.slice(2, 0, 1); }),
              HasSubstr("[slice] dim 2 is out of range for a tensor of 2 dims"));
}

TEST(TensorViews, ViewsShareStorageAndSeeWrites) {
  const Tensor t = Tensor::zeros({3, 4});
  const Tensor col = t.select(1, 2);
  const Tensor tr = t.t();
  const Tensor flat = t.view({12});
  EXPECT_TRUE(col.shares_storage(t));
  EXPECT_TRUE(tr.shares_storage(t));
  EXPECT_TRUE(flat.shares_storage(t));
  col.set({1}, 7.0);  // t[1, 2]
  EXPECT_EQ(t.value({1, 2}), 7.0);
  EXPECT_EQ(tr.value({2, 1}), 7.0);
  EXPECT_EQ(flat.value({6}), 7.0);
  flat.set({11}, 3.0);  // t[2, 3]
  EXPECT_EQ(tr.value({3, 2}), 3.0);
  t.slice(0, 0, 1).fill_(1.0);  // row 0 only
  EXPECT_EQ(t.value({0, 3}), 1.0);
  EXPECT_EQ(t.value({1, 0}), 0.0);
  EXPECT_EQ(t[1][2].item<float>(), 7.0f);
}

TEST(TensorViews, SelectAndNarrow) {
  const Tensor t = iota({2, 3, 4});  // strides [12, 4, 1]
  expect_geometry(t.select(1, 2), {2, 4}, {12, 1}, 8);
  expect_geometry(t.select(-1, -1), {2, 3}, {12, 4}, 3);
  expect_geometry(t.select(0, 1).select(0, 1), {4}, {1}, 16);
  expect_geometry(t.narrow(2, 1, 2), {2, 3, 2}, {12, 4, 1}, 1);
  expect_geometry(t.narrow(1, -2, 2), {2, 2, 4}, {12, 4, 1}, 4);
  EXPECT_THAT(error_of([&] { t.select(1, 3); }),
              HasSubstr("[select] index 3 is out of range for dim 1 of size 3 (shape [2, 3, 4])"));
  EXPECT_THAT(error_of([&] { t.narrow(2, 2, 3); }),
              HasSubstr("[narrow] start 2 + length 3 does not fit in dim 2 of size 4"));
}

TEST(TensorViews, TransposePermuteT) {
  const Tensor t = iota({2, 3, 4});
  expect_geometry(t.transpose(0, 2), {4, 3, 2}, {1, 4, 12}, 0);
  expect_geometry(t.transpose(-1, -2), {2, 4, 3}, {12, 1, 4}, 0);
  expect_geometry(t.permute({2, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0);
  expect_geometry(t.permute({-1, 1, 0}), {4, 3, 2}, {1, 4, 12}, 0);
  EXPECT_EQ(t.permute({2, 0, 1}).value({3, 1, 2}), t.value({1, 2, 3}));
  expect_geometry(iota({3, 5}).t(), {5, 3}, {1, 5}, 0);
  expect_geometry(iota({5}).t(), {5}, {1}, 0);
  EXPECT_FALSE(t.transpose(0, 1).is_contiguous());
  EXPECT_THAT(error_of([&] { t.t(); }),
              HasSubstr("[t] expects a tensor with at most 2 dims, got shape [2, 3, 4]"));
  const Tensor four = iota({2, 3, 4, 5});
  EXPECT_THAT(error_of([&] {
                four.permute({0, 0, 1, 2});
              }),
              HasSubstr("[permute] expected a permutation of 0..3, got [0, 0, 1, 2]"));
  EXPECT_THAT(
      error_of([&] {
        four.permute({0, 1, 2});
      }),
      HasSubstr(
          "[permute] expected a permutation of 0..3, got [0, 1, 2] (tensor shape [2, 3, 4, 5])"));
  EXPECT_THAT(error_of([&] { four.permute({0, 1, 2, 4}); }), HasSubstr("got [0, 1, 2, 4]"));
}

TEST(TensorViews, ViewComputesStrides) {
  const Tensor t = iota({4, 4});
  expect_geometry(t.view({16}), {16}, {1}, 0);
  expect_geometry(t.view({2, -1}), {2, 8}, {8, 1}, 0);
  expect_geometry(t.view({2, 2, 1, 4}), {2, 2, 1, 4}, {8, 4, 4, 1}, 0);
  expect_geometry(Tensor::scalar(1.0).view({1, 1}), {1, 1}, {1, 1}, 0);
  expect_geometry(iota({1}).view({}), {}, {}, 0);
  // A column slice [4, 2] with strides [4, 1]: the rows are not adjacent, but each row's two
  // elements are, so splitting the last dim or merging nothing is fine.
  const Tensor cols = t.slice(1, 0, 2);
  expect_geometry(cols.view({4, 2, 1}), {4, 2, 1}, {4, 1, 1}, 0);
  expect_geometry(cols.view({2, 2, 2}), {2, 2, 2}, {8, 4, 1}, 0);
  // A transposed tensor may split dims but not merge them.
  const Tensor tr = iota({2, 6}).t();  // [6, 2] strides [1, 6]
  expect_geometry(tr.view({3, 2, 2}), {3, 2, 2}, {2, 1, 6}, 0);
}

TEST(TensorViews, ViewErrors) {
  const Tensor t = iota({4, 4});
  EXPECT_THAT(error_of([&] {
                t.view({3, 5});
              }),
              HasSubstr("[view] shape [3, 5] is invalid for a tensor of 16 elements"));
  EXPECT_THAT(error_of([&] {
                t.view({-1, 3});
              }),
              HasSubstr("[view] shape [-1, 3] is invalid for a tensor of 16 elements"));
  EXPECT_THAT(error_of([&] {
                t.view({-1, -1});
              }),
              HasSubstr("[view] only one dimension can be inferred (-1), got [-1, -1]"));
  EXPECT_THAT(error_of([&] { t.view({4, -2}); }), HasSubstr("[view] invalid size -2 at dim 1"));
  const std::string msg = error_of([&] { t.t().view({16}); });
  EXPECT_THAT(msg,
              HasSubstr("[view] cannot view a tensor of shape [4, 4] with strides [1, 4] as [16]"));
  EXPECT_THAT(msg, HasSubstr("reshape()"));
  EXPECT_THAT(error_of([&] { Tensor::empty({0, 4}).view({-1, 0}); }), HasSubstr("ambiguous"));
}

TEST(TensorViews, ReshapeViewsWhenItCanCopiesWhenItMust) {
  const Tensor t = iota({3, 4});
  const Tensor r = t.reshape({4, 3});
  EXPECT_TRUE(r.shares_storage(t));
  const Tensor tr = t.t();
  const Tensor flat = tr.reshape({-1});
  EXPECT_FALSE(flat.shares_storage(t));
  EXPECT_TRUE(flat.is_contiguous());
  for (int64_t i = 0; i < 12; ++i)  // column-major order of t
    EXPECT_EQ(flat.value({i}), t.value({i % 3, i / 3}));
  EXPECT_THAT(error_of([&] {
                t.reshape({5, -1});
              }),
              HasSubstr("[reshape] shape [5, -1] is invalid for a tensor of 12 elements"));
}

TEST(TensorViews, ExpandBroadcastsWithStrideZero) {
  const Tensor col = iota({3, 1});
  expect_geometry(col.expand({3, 4}), {3, 4}, {1, 0}, 0);
  expect_geometry(col.expand({2, -1, 5}), {2, 3, 5}, {0, 1, 0}, 0);
  expect_geometry(iota({4}).expand({2, 4}), {2, 4}, {0, 1}, 0);
  expect_geometry(Tensor::scalar(3.0).expand({2, 2}), {2, 2}, {0, 0}, 0);
  const Tensor e = col.expand({3, 4});
  EXPECT_EQ(e.value({2, 3}), 2.0);
  EXPECT_TRUE(e.shares_storage(col));
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_THAT(error_of([&] {
                iota({2, 3}).expand({2, 4});
              }),
              HasSubstr("[expand] cannot expand shape [2, 3] to [2, 4]: size 4 at dim 1 must "
                        "match the existing size 3"));
  EXPECT_THAT(error_of([&] {
                iota({2, 3}).expand({3});
              }),
              HasSubstr("the target has fewer dims (1) than the tensor (2)"));
  EXPECT_THAT(error_of([&] { iota({3}).expand({-1, 3}); }), HasSubstr("new leading dim 0"));
}

TEST(TensorViews, SqueezeUnsqueezeFlatten) {
  const Tensor t = iota({2, 1, 3, 1});  // strides [3, 3, 1, 1]
  expect_geometry(t.squeeze(), {2, 3}, {3, 1}, 0);
  expect_geometry(t.squeeze(1), {2, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(t.squeeze(0), {2, 1, 3, 1}, {3, 3, 1, 1}, 0);  // size 2: unchanged
  expect_geometry(t.squeeze(-1), {2, 1, 3}, {3, 3, 1}, 0);
  expect_geometry(Tensor::scalar(1.0).squeeze(0), {}, {}, 0);
  const Tensor m = iota({2, 3});
  expect_geometry(m.unsqueeze(0), {1, 2, 3}, {6, 3, 1}, 0);
  expect_geometry(m.unsqueeze(1), {2, 1, 3}, {3, 3, 1}, 0);
  expect_geometry(m.unsqueeze(-1), {2, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(m.unsqueeze(2), {2, 3, 1}, {3, 1, 1}, 0);
  expect_geometry(m.t().unsqueeze(0), {1, 3, 2}, {3, 1, 3}, 0);
  EXPECT_TRUE(m.unsqueeze(1).is_contiguous());
  EXPECT_THAT(
      error_of([&] { m.unsqueeze(3); }),
      HasSubstr("[unsqueeze] dim 3 is out of range for a tensor of 3 dims (expected -3..2)"));

  const Tensor c = iota({2, 3, 4, 5});
  expect_geometry(c.flatten(), {120}, {1}, 0);
  expect_geometry(c.flatten(1, 2), {2, 12, 5}, {60, 5, 1}, 0);
  expect_geometry(c.flatten(-2), {2, 3, 20}, {60, 20, 1}, 0);
  expect_geometry(Tensor::scalar(1.0).flatten(), {1}, {1}, 0);
  EXPECT_TRUE(c.flatten(1).shares_storage(c));
  EXPECT_FALSE(c.transpose(1, 2).flatten(1, 2).shares_storage(c));  // must copy
  EXPECT_THAT(error_of([&] { c.flatten(2, 1); }),
              HasSubstr("[flatten] start_dim 2 must not come after end_dim 1"));
}

TEST(TensorViews, AsStridedChecksTheStorage) {
  const Tensor t = iota({12});
  const Tensor w = t.as_strided({5, 3}, {2, 1}, 1);  // overlapping sliding windows
  EXPECT_EQ(w.value({4, 2}), 11.0);
  EXPECT_TRUE(w.shares_storage(t));
  EXPECT_THAT(error_of([&] {
                t.as_strided({4, 4}, {4, 1}, 0);
              }),
              HasSubstr("reaches element 15, beyond the storage's 12 elements"));
  EXPECT_THAT(error_of([&] { t.as_strided({2}, {-1}, 5); }), HasSubstr("negative strides"));
}

TEST(TensorViews, ChannelsLastLayoutQueries) {
  const Tensor nchw = iota({2, 3, 4, 5});
  const Tensor nhwc_view = nchw.permute({0, 2, 3, 1});  // [2, 4, 5, 3] strides [60, 5, 1, 20]
  EXPECT_FALSE(nhwc_view.is_contiguous());
  const Tensor cl = nchw.contiguous(MemoryFormat::ChannelsLast);
  // A channels_last tensor permuted to NHWC is plain contiguous: the same bytes.
  EXPECT_TRUE(cl.permute({0, 2, 3, 1}).is_contiguous());
  EXPECT_TRUE(cl.is_non_overlapping_and_dense());
  EXPECT_FALSE(cl.slice(1, 0, 2).is_contiguous(MemoryFormat::ChannelsLast));
}

}  // namespace
}  // namespace mixprec
