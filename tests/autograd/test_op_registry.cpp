// One registry of op cases (ggml's test-backend-ops, in spirit): every differentiable op is
// listed once with how to make its inputs, and the same entry runs
//   forward:  the op on f32 inputs against the op on the same values in f64, within the
//             tolerance table's f32 row scaled by the op's reduction length;
//   gradient: gradcheck in f64 (central differences vs backward);
//   perf:     with MIXPREC_OP_PERF=1, a timing line per op (not a pass/fail test).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/autograd/gradcheck.h"
#include "mixprec/core/random.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"
#include "support/isa_levels.h"

namespace mixprec {
namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct InputSpec {
  Shape shape;
  double lo = -1.0, hi = 1.0;  // uniform range of the values
  bool grad = true;
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  Fn fn;
  double forward_terms = 1;  // reduction length that scales the forward tolerance
};

const std::vector<OpCase>& registry() {
  using kernels::Activation;
  using kernels::UpsampleMode;
  static const Tensor targets = Tensor::from_vector<int64_t>({2, 0, 1, 2});
  static const Tensor ignored = Tensor::from_vector<int64_t>({2, -100, 1, 2});
  static const Tensor indices = Tensor::from_vector<int64_t>({1, 3, 1, 0}, {2, 2});
  static const std::vector<OpCase> cases = {
      {"add_broadcast", {{{3, 4}}, {{4}}}, [](auto& x) { return x[0] + x[1]; }},
      {"sub_broadcast", {{{3, 1}}, {{1, 4}}}, [](auto& x) { return x[0] - x[1]; }},
      {"mul_broadcast", {{{2, 3, 4}}, {{3, 1}}}, [](auto& x) { return x[0] * x[1]; }},
      {"div", {{{3, 4}}, {{4}, 1.0, 2.0}}, [](auto& x) { return x[0] / x[1]; }},
      {"neg_scale", {{{5}}}, [](auto& x) { return -x[0] * 0.5; }},
      {"add_scalar", {{{5}}}, [](auto& x) { return x[0] + 0.3; }},
      {"rsub_scalar", {{{5}}}, [](auto& x) { return 2.0 - x[0]; }},
      {"div_scalar", {{{5}}}, [](auto& x) { return x[0] / 3.0; }},
      {"rdiv_scalar", {{{5}, 0.5, 2.0}}, [](auto& x) { return 1.5 / x[0]; }},
      {"exp", {{{7}}}, [](auto& x) { return exp(x[0]); }},
      {"log", {{{7}, 0.5, 3.0}}, [](auto& x) { return log(x[0]); }},
      {"sqrt", {{{7}, 0.5, 3.0}}, [](auto& x) { return sqrt(x[0]); }},
      {"rsqrt", {{{7}, 0.5, 3.0}}, [](auto& x) { return rsqrt(x[0]); }},
      {"pow", {{{7}, 0.5, 3.0}}, [](auto& x) { return pow(x[0], 2.5); }},
      {"clamp", {{{9}}}, [](auto& x) { return clamp(x[0], -0.5, 0.4); }},
      {"relu", {{{9}}}, [](auto& x) { return relu(x[0]); }},
      {"silu", {{{11}}}, [](auto& x) { return silu(x[0]); }},
      {"sigmoid", {{{11}}}, [](auto& x) { return sigmoid(x[0]); }},
      {"tanh", {{{11}}}, [](auto& x) { return tanh(x[0]); }},
      {"gelu_erf", {{{11}}}, [](auto& x) { return gelu(x[0]); }},
      {"gelu_tanh", {{{11}}}, [](auto& x) { return gelu(x[0], GeluApproximation::Tanh); }},
      {"sum_all", {{{3, 4}}}, [](auto& x) { return sum(x[0]); }, 12},
      {"sum_dim", {{{3, 4, 2}}}, [](auto& x) { return sum(x[0], {1}); }, 4},
      {"mean_keepdim",
       {{{3, 4, 2}}},
       [](auto& x) {
         return mean(x[0], {0, 2}, true);
       },
       6},
      {"matmul", {{{5, 7}}, {{7, 3}}}, [](auto& x) { return matmul(x[0], x[1]); }, 7},
      {"matmul_batched", {{{2, 4, 6}}, {{2, 6, 3}}}, [](auto& x) { return matmul(x[0], x[1]); }, 6},
      {"matmul_shared_b", {{{2, 4, 6}}, {{6, 3}}}, [](auto& x) { return matmul(x[0], x[1]); }, 6},
      {"linear_bias",
       {{{2, 3, 5}}, {{4, 5}}, {{4}}},
       [](auto& x) { return linear(x[0], x[1], x[2]); },
       5},
      {"conv2d_3x3",
       {{{2, 3, 5, 4}}, {{4, 3, 3, 3}}, {{4}}},
       [](auto& x) {
         return conv2d(x[0], x[1], x[2], {1, 1, 1, 1});
       },
       27},
      {"conv2d_3x3_residual",
       {{{2, 3, 5, 4}}, {{4, 3, 3, 3}}, {{4}}, {{2, 4, 5, 4}}},
       [](auto& x) { return conv2d(x[0], x[1], x[2], {1, 1, 1, 1}, x[3]); },
       28},
      {"conv2d_3x3_channel_offsets",  // [1, O, 1, 1]: folded into the bias
       {{{1, 3, 5, 4}}, {{4, 3, 3, 3}}, {{4}}, {{1, 4, 1, 1}}},
       [](auto& x) { return conv2d(x[0], x[1], x[2], {1, 1, 1, 1}, x[3]); },
       28},
      {"conv2d_strided_dilated_grouped",
       {{{1, 4, 7, 7}}, {{4, 2, 3, 3}}, {{4}}},
       [](auto& x) {
         return conv2d(x[0], x[1], x[2], {2, 2, 2, 2});
       },
       18},
      {"conv2d_depthwise",
       {{{1, 3, 4, 5}}, {{3, 1, 3, 3}}, {{3}}},
       [](auto& x) {
         return conv2d(x[0], x[1], x[2], {1, 1, 1, 3});
       },
       9},
      {"upsample_nearest",
       {{{1, 2, 3, 4}}},
       [](auto& x) { return upsample(x[0], 2, UpsampleMode::Nearest); }},
      {"upsample_bilinear",
       {{{2, 1, 3, 3}}},
       [](auto& x) { return upsample(x[0], 2, UpsampleMode::Bilinear); },
       4},
      // Flows up to 1.4 pixels cross pixel borders and, at the frame's edges, the clamp.
      {"warp",
       {{{2, 3, 4, 5}}, {{2, 2, 4, 5}, -1.4, 1.4}},
       [](auto& x) { return warp(x[0], x[1]); },
       4},
      {"avg_pool2d", {{{1, 3, 4, 6}}}, [](auto& x) { return avg_pool2d(x[0], 2); }, 4},
      {"max_pool2d", {{{1, 3, 4, 6}}}, [](auto& x) { return max_pool2d(x[0], 2); }},
      {"attention",
       {{{1, 2, 5, 4}}, {{1, 2, 7, 4}}, {{1, 2, 7, 3}}},
       [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
       11},
      {"attention_causal",
       {{{2, 1, 6, 4}}, {{2, 1, 6, 4}}, {{2, 1, 6, 4}}},
       [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true}); },
       10},
      {"attention_packed",
       {{{2, 5, 12}}},
       [](auto& x) { return multi_head_attention_packed(x[0], 2); },
       7},
      {"attention_packed_causal_mask",
       {{{1, 6, 18}}, {{6, 6}, -1.0, 1.0, false}},
       [](auto& x) { return multi_head_attention_packed(x[0], 3, {.causal = true, .mask = x[1]}); },
       8},
      {"softmax", {{{3, 5}}}, [](auto& x) { return softmax(x[0], 1); }, 5},
      {"log_softmax", {{{4, 3}}}, [](auto& x) { return log_softmax(x[0], 0); }, 4},
      {"layer_norm",
       {{{3, 6}}, {{6}}, {{6}}},
       [](auto& x) { return layer_norm(x[0], {6}, x[1], x[2]); },
       6},
      {"layer_norm_2d_no_affine",
       {{{2, 2, 3}}},
       [](auto& x) {
         return layer_norm(x[0], {2, 3});
       },
       6},
      {"rms_norm", {{{4, 5}}, {{5}}}, [](auto& x) { return rms_norm(x[0], {5}, x[1]); }, 5},
      {"group_norm",
       {{{2, 4, 3, 2}}, {{4}}, {{4}}},
       [](auto& x) { return group_norm(x[0], 2, x[1], x[2]); },
       12},
      {"group_norm_silu",
       {{{1, 4, 2, 3}}, {{4}}, {{4}}},
       [](auto& x) { return group_norm(x[0], 2, x[1], x[2], 1e-5, Activation::SiLU); },
       12},
      {"cross_entropy", {{{4, 3}}}, [](auto& x) { return cross_entropy(x[0], targets); }, 12},
      {"cross_entropy_sum_smoothed_ignored",
       {{{4, 3}}},
       [](auto& x) {
         kernels::CrossEntropyOptions o;
         o.label_smoothing = 0.1;
         return cross_entropy(x[0], ignored, kernels::Reduction::Sum, o);
       },
       12},
      {"mse_loss", {{{3, 4}}, {{3, 4}}}, [](auto& x) { return mse_loss(x[0], x[1]); }, 12},
      {"embedding", {{{5, 3}}}, [](auto& x) { return embedding(x[0], indices); }},
      {"dropout",
       {{{20}}},
       [](auto& x) {
         Generator gen(9);  // the same mask on every evaluation
         return dropout(x[0], 0.3, true, gen);
       }},
      {"cat",
       {{{2, 3}}, {{2, 2}}},
       [](auto& x) {
         return cat({x[0], x[1]}, 1);
       }},
      {"views",
       {{{3, 5}}},
       [](auto& x) { return x[0].slice(1, 1, 4).transpose(0, 1).contiguous() * 2.0; }},
      {"expand",
       {{{3, 2}}},
       [](auto& x) {
         return x[0].unsqueeze(0).expand({4, 3, 2}) * 1.5;
       }},
  };
  return cases;
}

std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, uint64_t seed, bool requires_grad) {
  Generator gen(seed);
  std::vector<Tensor> inputs;
  for (const InputSpec& s : c.inputs) {
    Tensor t = Tensor::uniform(s.shape, s.lo, s.hi, gen, DType::F64).to(dtype);
    if (requires_grad && s.grad) t.requires_grad_();
    inputs.push_back(t);
  }
  return inputs;
}

class OpRegistry : public ::testing::TestWithParam<std::size_t> {};

TEST_P(OpRegistry, ForwardF32MatchesF64) {
  const OpCase& c = registry()[GetParam()];
  const std::vector<Tensor> x64 = make_inputs(c, DType::F64, GetParam() + 1, false);
  std::vector<Tensor> x32;
  for (const Tensor& t : x64) x32.push_back(t.to(DType::F32));
  const Tensor want = c.fn(x64).to(DType::F64).contiguous(),
               got = c.fn(x32).to(DType::F64).contiguous();
  ASSERT_EQ(want.shape(), got.shape());
  const double tol = 4e-6 * (1.0 + c.forward_terms);
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data<double>()[i], g = got.data<double>()[i];
    ASSERT_NEAR(g, w, tol * (1.0 + std::fabs(w))) << "element " << i;
  }
}

TEST_P(OpRegistry, GradientMatchesFiniteDifferences) {
  const OpCase& c = registry()[GetParam()];
  const autograd::GradcheckResult r =
      autograd::gradcheck(c.fn, make_inputs(c, DType::F64, GetParam() + 100, true));
  EXPECT_TRUE(r.ok) << r.message << " (max error " << r.max_abs_error << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, OpRegistry, ::testing::Range<std::size_t>(0, registry().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return registry()[info.param].name;
                         });

// Scalar operands are applied in f32 (f64 for f64 tensors) and the result is rounded once into
// the tensor's dtype (DESIGN.md, PyTorch's opmath): a scalar is never first rounded to the
// tensor's 16-bit dtype. 37 elements run the vector body and a tail at every kernel level.
struct ScalarCase {
  std::string name;
  DType dtype;
  double x;
  std::function<Tensor(const Tensor&)> fn;
  double want;
};

double in_bf16(float v) { return static_cast<float>(BFloat16(v)); }

const std::vector<ScalarCase>& scalar_cases() {
  static const std::vector<ScalarCase> cases = {
      // f16(1e-7) = 1.19e-7 would give 1.19e-4 (19% off); 1e-4 rounds to 1678 * 2^-24.
      {"mul_f16_tiny", DType::F16, 1000.0, [](const Tensor& x) { return mul(x, 1e-7); },
       1678 * std::ldexp(1.0, -24)},
      // bf16(2^-140) = 0 (below bf16's smallest subnormal 2^-133) would give 0.
      {"mul_bf16_below_range", DType::BF16, 65536.0,
       [](const Tensor& x) { return mul(x, std::ldexp(1.0, -140)); }, std::ldexp(1.0, -124)},
      // 1 + 2^-11 + 2^-20 rounds to 1 in f16 (a tie below it), the product rounds up in f16.
      {"mul_f16_above_tie", DType::F16, 1.0,
       [](const Tensor& x) { return mul(x, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20)); },
       1.0 + std::ldexp(1.0, -10)},
      {"operator_mul_bf16", DType::BF16, 65536.0,
       [](const Tensor& x) { return x * std::ldexp(1.0, -140); }, std::ldexp(1.0, -124)},
      // x^p with p = 1 + 2^-9 (not a bf16 number: it would round to 1 and give x itself).
      {"pow_bf16", DType::BF16, 256.0,
       [](const Tensor& x) { return pow(x, 1.0 + std::ldexp(1.0, -9)); },
       in_bf16(std::pow(256.0f, 1.0f + std::ldexp(1.0f, -9)))},
      // A bound that is not a bf16 number is compared in f32; the result rounds once.
      {"clamp_bf16_low_bound", DType::BF16, 0.0,
       [](const Tensor& x) { return clamp(x, 1e-7, 1.0); }, in_bf16(1e-7f)},
      {"mul_f64", DType::F64, 3.0, [](const Tensor& x) { return mul(x, 0.1); }, 3.0 * 0.1},
      // 1 + (2^-8 + 2^-20) is above the tie between 1 and 1 + 2^-7: it rounds up. The number
      // rounded to bf16 first (2^-8) would make it the tie, which rounds to 1.
      {"add_bf16_above_tie", DType::BF16, 1.0,
       [](const Tensor& x) { return x + (std::ldexp(1.0, -8) + std::ldexp(1.0, -20)); },
       1.0 + std::ldexp(1.0, -7)},
      // 1000 / 1e7 in f32 is 1e-4 (1678 * 2^-24 in f16); 1e7 rounded to f16 first is inf: 0.
      {"div_f16_tiny", DType::F16, 1000.0, [](const Tensor& x) { return x / 1e7; },
       1678 * std::ldexp(1.0, -24)},
      // (1 + 2^-8 + 2^-20) - 2^-7 = 1 - 2^-8 + 2^-20 rounds to 1 - 2^-8; with the number
      // rounded to bf16 first (1 + 2^-7) it would be 1.
      {"rsub_bf16", DType::BF16, std::ldexp(1.0, -7),
       [](const Tensor& x) { return (1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)) - x; },
       1.0 - std::ldexp(1.0, -8)},
      {"rdiv_f16", DType::F16, 3.0, [](const Tensor& x) { return 1.0 / x; },
       static_cast<double>(static_cast<float>(Half(1.0f / 3.0f)))},
      {"sub_f64", DType::F64, 0.3, [](const Tensor& x) { return x - 0.1; }, 0.3 - 0.1},
  };
  return cases;
}

class ScalarOperand : public test_support::IsaTest {};

TEST_P(ScalarOperand, AppliedInF32AndRoundedOnce) {
  for (const ScalarCase& c : scalar_cases()) {
    const Tensor x = Tensor::full({37}, c.x, c.dtype);
    const Tensor y = c.fn(x);
    ASSERT_EQ(y.dtype(), c.dtype) << c.name << ": a scalar must not change the dtype";
    const Tensor got = y.to(DType::F64).contiguous();
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_EQ(got.data<double>()[i], c.want) << c.name << ", element " << i;
  }
}

// A loss-scaled backward through a tiny constant: d(x * 2^-140)/dx * 65536 = 2^-124 in bf16.
TEST_P(ScalarOperand, GradientKeepsTheRule) {
  const Tensor x = Tensor::full({37}, 1.0, DType::BF16).requires_grad_();
  const Tensor y = mul(x, std::ldexp(1.0, -140));
  y.backward(Tensor::full({37}, 65536.0, DType::BF16));
  ASSERT_EQ(x.grad().dtype(), DType::BF16);
  const Tensor g = x.grad().to(DType::F64).contiguous();
  for (int64_t i = 0; i < g.numel(); ++i)
    ASSERT_EQ(g.data<double>()[i], std::ldexp(1.0, -124)) << "element " << i;
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ScalarOperand);

// One line per op: forward + backward time at the registry's sizes (dispatch overhead shows).
TEST(OpRegistryPerf, EveryOpWhenAsked) {
  if (std::getenv("MIXPREC_OP_PERF") == nullptr)
    GTEST_SKIP() << "set MIXPREC_OP_PERF=1 to time every op";
  for (const OpCase& c : registry()) {
    const std::vector<Tensor> x = make_inputs(c, DType::F32, 7, true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) sum(c.fn(x).to(DType::F32)).backward();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        100;
    std::printf("[ perf ] %-36s forward+backward %.1f us\n", c.name.c_str(), us);
  }
}

}  // namespace
}  // namespace mixprec
