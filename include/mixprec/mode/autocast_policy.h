#pragma once
// The autocast policy: one row per differentiable op front-end, saying in which dtype the op
// runs inside an amp::Autocast region. This table is the whole policy (DESIGN.md section 1:
// "no silent precision change"); a new op adds an enumerator and a row, and the static_asserts
// below refuse to compile until both agree.
//
//   Lower    run in the autocast dtype (bf16/f16): the GEMM-shaped ops, where 16-bit operands
//            double the throughput and f32 accumulation keeps the result accurate.
//   F32      run in f32: ops whose results lose too much in 16 bits (exp/log/pow overflow or
//            cancel; softmax, norms, losses and reductions sum many terms or divide by them).
//   Promote  cast every floating input to the widest floating dtype among them, so mixing a
//            16-bit activation with an f32 tensor is well defined (f16 with bf16 gives f32).
//   Keep     run in the input's own dtype (elementwise activations, views of data, gathers).
//
// As in PyTorch, only f32/f16/bf16 inputs are cast: f64 tensors and integer tensors (indices,
// targets) pass through untouched.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mixprec::amp {

enum class CastPolicy : uint8_t { Lower, F32, Promote, Keep };

enum class AutocastOp : uint8_t {
  // Lower
  Matmul,  // batched matmul too: one front-end
  Linear,
  Conv2d,
  ScaledDotProductAttention,
  // F32
  Softmax,
  LogSoftmax,
  LayerNorm,
  GroupNorm,
  RMSNorm,
  CrossEntropy,
  MSELoss,
  Exp,
  Log,
  Pow,
  Rsqrt,
  Sum,
  Mean,
  UpsampleBilinear,
  Warp,
  // Promote
  Add,
  Sub,
  Mul,
  Div,
  Cat,
  // Keep
  Scalar,  // add, sub, mul, div with a number
  Neg,
  Relu,
  Sqrt,
  Clamp,
  Gelu,
  Silu,
  Sigmoid,
  Tanh,
  UpsampleNearest,
  AvgPool2d,
  MaxPool2d,
  Embedding,
  Dropout,
  Count
};

struct AutocastRow {
  AutocastOp op;
  std::string_view name;
  CastPolicy policy;
};

inline constexpr std::array kAutocastPolicy = {
    AutocastRow{AutocastOp::Matmul, "matmul", CastPolicy::Lower},
    AutocastRow{AutocastOp::Linear, "linear", CastPolicy::Lower},
    AutocastRow{AutocastOp::Conv2d, "conv2d", CastPolicy::Lower},
    AutocastRow{AutocastOp::ScaledDotProductAttention, "scaled_dot_product_attention",
                CastPolicy::Lower},
    AutocastRow{AutocastOp::Softmax, "softmax", CastPolicy::F32},
    AutocastRow{AutocastOp::LogSoftmax, "log_softmax", CastPolicy::F32},
    AutocastRow{AutocastOp::LayerNorm, "layer_norm", CastPolicy::F32},
    AutocastRow{AutocastOp::GroupNorm, "group_norm", CastPolicy::F32},
    AutocastRow{AutocastOp::RMSNorm, "rms_norm", CastPolicy::F32},
    AutocastRow{AutocastOp::CrossEntropy, "cross_entropy", CastPolicy::F32},
    AutocastRow{AutocastOp::MSELoss, "mse_loss", CastPolicy::F32},
    AutocastRow{AutocastOp::Exp, "exp", CastPolicy::F32},
    AutocastRow{AutocastOp::Log, "log", CastPolicy::F32},
    AutocastRow{AutocastOp::Pow, "pow", CastPolicy::F32},
    AutocastRow{AutocastOp::Rsqrt, "rsqrt", CastPolicy::F32},
    AutocastRow{AutocastOp::Sum, "sum", CastPolicy::F32},
    AutocastRow{AutocastOp::Mean, "mean", CastPolicy::F32},
    AutocastRow{AutocastOp::UpsampleBilinear, "upsample_bilinear", CastPolicy::F32},
    AutocastRow{AutocastOp::Warp, "warp", CastPolicy::F32},
    AutocastRow{AutocastOp::Add, "add", CastPolicy::Promote},
    AutocastRow{AutocastOp::Sub, "sub", CastPolicy::Promote},
    AutocastRow{AutocastOp::Mul, "mul", CastPolicy::Promote},
    AutocastRow{AutocastOp::Div, "div", CastPolicy::Promote},
    AutocastRow{AutocastOp::Cat, "cat", CastPolicy::Promote},
    AutocastRow{AutocastOp::Scalar, "scalar_arith", CastPolicy::Keep},
    AutocastRow{AutocastOp::Neg, "neg", CastPolicy::Keep},
    AutocastRow{AutocastOp::Relu, "relu", CastPolicy::Keep},
    AutocastRow{AutocastOp::Sqrt, "sqrt", CastPolicy::Keep},
    AutocastRow{AutocastOp::Clamp, "clamp", CastPolicy::Keep},
    AutocastRow{AutocastOp::Gelu, "gelu", CastPolicy::Keep},
    AutocastRow{AutocastOp::Silu, "silu", CastPolicy::Keep},
    AutocastRow{AutocastOp::Sigmoid, "sigmoid", CastPolicy::Keep},
    AutocastRow{AutocastOp::Tanh, "tanh", CastPolicy::Keep},
    AutocastRow{AutocastOp::UpsampleNearest, "upsample_nearest", CastPolicy::Keep},
    AutocastRow{AutocastOp::AvgPool2d, "avg_pool2d", CastPolicy::Keep},
    AutocastRow{AutocastOp::MaxPool2d, "max_pool2d", CastPolicy::Keep},
    AutocastRow{AutocastOp::Embedding, "embedding", CastPolicy::Keep},
    AutocastRow{AutocastOp::Dropout, "dropout", CastPolicy::Keep},
};

static_assert(kAutocastPolicy.size() == static_cast<std::size_t>(AutocastOp::Count),
              "every AutocastOp needs exactly one row in kAutocastPolicy");

// Rows are in enumerator order, so policy_of() is an index.
constexpr bool autocast_rows_in_order() {
  for (std::size_t i = 0; i < kAutocastPolicy.size(); ++i)
    if (static_cast<std::size_t>(kAutocastPolicy[i].op) != i) return false;
  return true;
}
static_assert(autocast_rows_in_order(), "kAutocastPolicy rows must follow AutocastOp's order");

constexpr const AutocastRow& policy_row(AutocastOp op) {
  return kAutocastPolicy[static_cast<std::size_t>(op)];
}
constexpr CastPolicy policy_of(AutocastOp op) { return policy_row(op).policy; }

}  // namespace mixprec::amp
