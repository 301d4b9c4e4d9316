// multi_head_attention_packed against what it replaces: q, k, v sliced and viewed as heads,
// scaled_dot_product_attention, the heads merged by permute + reshape. Same kernels, same
// roundings, so the outputs and gradients must be the same bits, not merely close. (The f64
// gradient check and the f32-vs-f64 forward are in the op registry, test_op_registry.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>

#include "mixprec/core/random.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/reduce.h"
#include "support/error_of.h"

namespace mixprec {
namespace {

using test_support::error_of;

// The unfused path, as CausalSelfAttention wrote it before the packed op.
Tensor split_attend_merge(const Tensor& qkv, int64_t heads, const AttentionParams& params) {
  const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3;
  auto head_view = [&](int64_t part) {
    return qkv.slice(2, part * d, (part + 1) * d)
        .view({b, t, heads, d / heads})
        .permute({0, 2, 1, 3});
  };
  return scaled_dot_product_attention(head_view(0), head_view(1), head_view(2), params)
      .permute({0, 2, 1, 3})
      .reshape({b, t, d});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

// dtype, sequence length, causal
class PackedAttention : public ::testing::TestWithParam<std::tuple<DType, int64_t, bool>> {};

TEST_P(PackedAttention, MatchesSplitAttendMergeForwardAndGradient) {
  const auto [dtype, t, causal] = GetParam();
  const int64_t b = 2, heads = 3, head_dim = 16, d = heads * head_dim;
  Generator gen(static_cast<uint64_t>(t) * 2 + (causal ? 1 : 0));
  const Tensor values = Tensor::randn({b, t, 3 * d}, gen).to(dtype);
  const Tensor grad_y = Tensor::randn({b, t, d}, gen).to(dtype);
  const Tensor packed_in = values.clone(), split_in = values.clone();
  packed_in.requires_grad_();
  split_in.requires_grad_();

  const Tensor packed = multi_head_attention_packed(packed_in, heads, {.causal = causal});
  const Tensor split = split_attend_merge(split_in, heads, {.causal = causal});
  EXPECT_TRUE(packed.is_contiguous());
  EXPECT_TRUE(same_bits(packed, split));

  packed.backward(grad_y);
  split.backward(grad_y);
  ASSERT_TRUE(packed_in.grad().defined());
  EXPECT_EQ(packed_in.grad().dtype(), dtype);
  EXPECT_TRUE(same_bits(packed_in.grad(), split_in.grad()));
}

INSTANTIATE_TEST_SUITE_P(Ops, PackedAttention,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16, DType::F16),
                                            ::testing::Values<int64_t>(17, 65, 150),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<PackedAttention::ParamType>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_T" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_causal" : "_full");
                         });

TEST(OpsAttentionPacked, AnyQkvLayoutAndAnExpandedGradient) {
  // qkv with a strided last dim (a transposed [B, 3D, T]) and sum()'s expanded gradient: both
  // go through copies, with the same results.
  Generator gen(5);
  const Tensor base = Tensor::randn({2, 24, 9}, gen);
  const Tensor strided = base.clone(), reference = base.transpose(1, 2).contiguous();
  strided.requires_grad_();
  reference.requires_grad_();
  const Tensor packed = multi_head_attention_packed(strided.transpose(1, 2), 2);
  const Tensor split = split_attend_merge(reference, 2, {});
  EXPECT_TRUE(same_bits(packed, split));
  sum(packed).backward();
  sum(split).backward();
  EXPECT_TRUE(same_bits(strided.grad().transpose(1, 2), reference.grad()));
}

TEST(OpsAttentionPacked, MaskIsBroadcastOverBatchAndHeads) {
  Generator gen(6);
  const Tensor qkv = Tensor::randn({2, 7, 3 * 8}, gen);
  const Tensor mask = Tensor::randn({7, 7}, gen);
  EXPECT_TRUE(same_bits(multi_head_attention_packed(qkv, 4, {.mask = mask}),
                        split_attend_merge(qkv, 4, {.mask = mask})));
}

TEST(OpsAttentionPacked, RejectsBadShapes) {
  const Tensor qkv = Tensor::zeros({2, 5, 30});
  EXPECT_EQ(error_of([&] { multi_head_attention_packed(qkv, 4); }),
            "[multi_head_attention_packed] expected qkv [B, T, 3 * D] with D a multiple of 4 "
            "heads, got [2, 5, 30]");
  EXPECT_NE(error_of([&] {
              multi_head_attention_packed(Tensor::zeros({5, 30}), 2);
            }).find("expected qkv [B, T, 3 * D]"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { multi_head_attention_packed(qkv, 0); }),
            "[multi_head_attention_packed] heads must be >= 1, got 0");
  EXPECT_NE(error_of([&] {
              multi_head_attention_packed(Tensor::zeros({2, 5, 30}, DType::I64), 5);
            }).find("expected a floating tensor"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec
