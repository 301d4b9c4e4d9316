// Elementwise op front-ends: validate, run the kernel with autograd off, record the node.
#include "mixprec/ops/arith.h"

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/mode/grad_mode.h"
#include "op_util.h"

namespace mixprec {
namespace {

using amp::autocast_args;
using amp::AutocastOp;
using autograd::Node;
using kernels::BinaryOp;
using kernels::UnaryOp;
using ops_detail::sum_to;

Tensor run_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::binary_op_name(op).data();
  ops_detail::check_float(name, a);
  ops_detail::check_float(name, b);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  // The output takes the layout of an input that already has its shape, so a channels_last
  // activation plus a broadcast bias [N, C, 1, 1] stays channels_last.
  const MemoryFormat format = a.shape() == shape   ? a.suggest_memory_format()
                              : b.shape() == shape ? b.suggest_memory_format()
                                                   : MemoryFormat::Contiguous;
  Tensor out = Tensor::empty(shape, promote(a.dtype(), b.dtype()), format);
  capture::launch(
      name, {&a, &b}, {&out},
      [op](const capture::KernelArgs& k) { kernels::binary(op, k.in(0), k.in(1), k.out(0)); },
      capture::Aliasing::Elementwise);
  return out;
}

Tensor run_unary(UnaryOp op, const Tensor& x) {
  ops_detail::check_float(kernels::unary_op_name(op).data(), x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.suggest_memory_format());
  capture::launch(
      kernels::unary_op_name(op), {&x}, {&out},
      [op](const capture::KernelArgs& k) { kernels::unary(op, k.in(0), k.out(0)); },
      capture::Aliasing::Elementwise);
  return out;
}

// Binary nodes keep the input shapes and dtypes to reduce broadcast gradients back.
struct BinaryNode : Node {
  Shape a_shape, b_shape;
  DType a_dtype, b_dtype;
  BinaryNode(const Tensor& a, const Tensor& b)
      : a_shape(a.shape()), b_shape(b.shape()), a_dtype(a.dtype()), b_dtype(b.dtype()) {}
};

struct AddBackward final : BinaryNode {
  bool negate_b;  // sub: b's gradient is -g
  AddBackward(const Tensor& a, const Tensor& b, bool negate) : BinaryNode(a, b), negate_b(negate) {}
  std::string_view name() const override { return negate_b ? "SubBackward" : "AddBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    return {sum_to(g[0], a_shape, a_dtype), sum_to(negate_b ? neg(g[0]) : g[0], b_shape, b_dtype)};
  }
};

// A binary node whose backward needs both operands' values: it saves them (detached).
struct SavingBinaryNode : BinaryNode {
  Tensor a, b;
  SavingBinaryNode(const Tensor& a_, const Tensor& b_)
      : BinaryNode(a_, b_), a(a_.detach()), b(b_.detach()) {}
  void release_saved() override { a = b = Tensor(); }
};

struct MulBackward final : SavingBinaryNode {
  using SavingBinaryNode::SavingBinaryNode;
  std::string_view name() const override { return "MulBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    return {next_edges[0].valid() ? sum_to(mul(g[0], b), a_shape, a_dtype) : Tensor(),
            next_edges[1].valid() ? sum_to(mul(g[0], a), b_shape, b_dtype) : Tensor()};
  }
};

struct DivBackward final : SavingBinaryNode {
  using SavingBinaryNode::SavingBinaryNode;
  std::string_view name() const override { return "DivBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    const Tensor ga = div(g[0], b);
    return {next_edges[0].valid() ? sum_to(ga, a_shape, a_dtype) : Tensor(),
            next_edges[1].valid() ? sum_to(neg(div(mul(ga, a), b)), b_shape, b_dtype) : Tensor()};
  }
};

// 1 where x > 0, else 0 (NaN stays NaN so it propagates), in x's dtype.
Tensor positive_mask(const Tensor& x) {
  const Tensor xf = x.to(DType::F32).contiguous();
  Tensor mask = Tensor::empty(x.shape(), DType::F32);
  const float* in = xf.data<float>();
  float* m = mask.data<float>();
  for (int64_t i = 0; i < xf.numel(); ++i)
    m[i] = in[i] != in[i] ? in[i] : (in[i] > 0.0f ? 1.0f : 0.0f);
  return mask.to(x.dtype());
}

// d/dx of a unary op from what it saved (the input or the output).
struct UnaryBackward final : Node {
  UnaryOp op;
  Tensor saved;
  UnaryBackward(UnaryOp op_, Tensor saved_) : op(op_), saved(std::move(saved_)) {}
  std::string_view name() const override { return kernels::unary_op_name(op); }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    switch (op) {
      case UnaryOp::Neg:
        return {neg(g[0])};
      case UnaryOp::Exp:
        return {mul(g[0], saved)};  // saved = exp(x)
      case UnaryOp::Log:
        return {div(g[0], saved)};  // saved = x
      case UnaryOp::Relu:
        return {mul(g[0], positive_mask(saved))};  // saved = relu(x)
      case UnaryOp::Sqrt:
        return {div(mul(g[0], 0.5), saved)};  // saved = sqrt(x)
      case UnaryOp::Rsqrt: {                  // saved = x^-1/2: -x^-3/2 / 2
        return {mul(mul(g[0], mul(mul(saved, saved), saved)), -0.5)};
      }
      default:
        MIXPREC_ASSERT(false && "unary op without a backward");
    }
    return {Tensor()};
  }
  void release_saved() override { saved = Tensor(); }
};

template <typename NodeT, typename... Args>
Tensor finish(Tensor out, std::initializer_list<const Tensor*> inputs, Args&&... args) {
  if (autograd::needs_grad(inputs))
    autograd::record(std::make_shared<NodeT>(std::forward<Args>(args)...), inputs, {&out});
  return out;
}

// A scalar operand in the op's math type: f32, or f64 for an f64 tensor. It is never rounded
// to a 16-bit tensor's dtype first (PyTorch's opmath): mul(f16 1000, 1e-7) is 1.0002e-4, the
// product rounded once, not 1000 * f16(1e-7) = 1.19e-4; mul(bf16 65536, 2^-140) is 2^-124, not
// 65536 * 0. The output keeps the tensor's dtype (a Python scalar does not promote).
Tensor opmath_scalar(double s, DType tensor_dtype) {
  return Tensor::scalar(s, tensor_dtype == DType::F64 ? DType::F64 : DType::F32);
}

// The gradient of a scalar op is itself made of scalar ops (and tensor ops on g), so a
// loss-scaled gradient through a tiny constant keeps the opmath rule too. s / a saves a and
// the output: d(s / a)/da = -(s / a) / a.
struct ScalarBackward final : Node {
  BinaryOp op;
  double s;
  bool scalar_first;  // s op a rather than a op s
  Tensor a, out;      // s / a only
  std::string_view name() const override { return "ScalarBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    switch (op) {
      case BinaryOp::Add:
        return {g[0]};
      case BinaryOp::Sub:
        return {scalar_first ? neg(g[0]) : g[0]};
      case BinaryOp::Mul:
        return {mul(g[0], s)};
      case BinaryOp::Div:
        return {scalar_first ? neg(div(mul(g[0], out), a)) : div(g[0], s)};
      default:
        MIXPREC_ASSERT(false && "scalar op without a backward");
    }
    return {Tensor()};
  }
  void release_saved() override { a = out = Tensor(); }
};

// pow(x, p): g p x^(p - 1);  clamp: g where lo <= x <= hi (bounds inclusive, as torch.clamp).
struct PowBackward final : Node {
  Tensor x;
  double p;
  std::string_view name() const override { return "PowBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    return {mul(mul(g[0], pow(x, p - 1.0)), p)};
  }
  void release_saved() override { x = Tensor(); }
};

struct ClampBackward final : Node {
  Tensor x;
  double lo, hi;
  std::string_view name() const override { return "ClampBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    const Tensor xf = x.to(DType::F64).contiguous();
    Tensor mask = Tensor::empty(x.shape(), DType::F64);
    for (int64_t i = 0; i < xf.numel(); ++i) {
      const double v = xf.data<double>()[i];
      mask.data<double>()[i] = v >= lo && v <= hi ? 1.0 : 0.0;
    }
    return {mul(g[0], mask.to(g[0].dtype()))};
  }
  void release_saved() override { x = Tensor(); }
};

// a op s, or s op a: the kernel takes s as a 0-d f32 (f64) tensor and writes a's dtype.
Tensor scalar_op(BinaryOp op, const Tensor& a_in, double s, bool scalar_first) {
  const auto [a] = autocast_args(AutocastOp::Scalar, a_in);
  ops_detail::check_float(kernels::binary_op_name(op).data(), a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.suggest_memory_format());
  {
    NoGrad no_grad;
    const Tensor scalar = opmath_scalar(s, a.dtype());
    const Tensor& lhs = scalar_first ? scalar : a;
    const Tensor& rhs = scalar_first ? a : scalar;
    capture::launch(
        kernels::binary_op_name(op), {&lhs, &rhs}, {&out},
        [op](const capture::KernelArgs& k) { kernels::binary(op, k.in(0), k.in(1), k.out(0)); },
        capture::Aliasing::Elementwise);
  }
  ops_detail::record_backward<ScalarBackward>({&a}, {&out}, [&](ScalarBackward& node) {
    node.op = op;
    node.s = s;
    node.scalar_first = scalar_first;
    if (op == BinaryOp::Div && scalar_first) {
      node.a = a.detach();
      node.out = out.detach();
    }
  });
  return out;
}

// What a unary op's backward needs: nothing, its input, or its output.
enum class Saved { Nothing, Input, Output };

Tensor unary_op(AutocastOp policy, UnaryOp op, const Tensor& x_in, Saved saved) {
  const auto [x] = autocast_args(policy, x_in);
  Tensor out;
  {
    NoGrad no_grad;
    out = run_unary(op, x);
  }
  const Tensor keep = saved == Saved::Input    ? x.detach()
                      : saved == Saved::Output ? out.detach()
                                               : Tensor();
  return finish<UnaryBackward>(out, {&x}, op, keep);
}

// Runs a broadcasting binary kernel with autograd off, then records NodeT(a, b, extra...).
template <typename NodeT, typename... Extra>
Tensor binary_op(AutocastOp policy, BinaryOp op, const Tensor& a_in, const Tensor& b_in,
                 Extra... extra) {
  const auto [a, b] = autocast_args(policy, a_in, b_in);
  Tensor out;
  {
    NoGrad no_grad;
    out = run_binary(op, a, b);
  }
  return finish<NodeT>(out, {&a, &b}, a, b, extra...);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary_op<AddBackward>(AutocastOp::Add, BinaryOp::Add, a, b, false);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary_op<AddBackward>(AutocastOp::Sub, BinaryOp::Sub, a, b, true);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary_op<MulBackward>(AutocastOp::Mul, BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary_op<DivBackward>(AutocastOp::Div, BinaryOp::Div, a, b);
}

Tensor add(const Tensor& a, double s) { return scalar_op(BinaryOp::Add, a, s, false); }
Tensor sub(const Tensor& a, double s) { return scalar_op(BinaryOp::Sub, a, s, false); }
Tensor sub(double s, const Tensor& a) { return scalar_op(BinaryOp::Sub, a, s, true); }
Tensor mul(const Tensor& a, double s) { return scalar_op(BinaryOp::Mul, a, s, false); }
Tensor div(const Tensor& a, double s) { return scalar_op(BinaryOp::Div, a, s, false); }
Tensor div(double s, const Tensor& a) { return scalar_op(BinaryOp::Div, a, s, true); }

Tensor neg(const Tensor& x) { return unary_op(AutocastOp::Neg, UnaryOp::Neg, x, Saved::Nothing); }
Tensor exp(const Tensor& x) { return unary_op(AutocastOp::Exp, UnaryOp::Exp, x, Saved::Output); }
Tensor log(const Tensor& x) { return unary_op(AutocastOp::Log, UnaryOp::Log, x, Saved::Input); }
Tensor relu(const Tensor& x) { return unary_op(AutocastOp::Relu, UnaryOp::Relu, x, Saved::Output); }
Tensor sqrt(const Tensor& x) { return unary_op(AutocastOp::Sqrt, UnaryOp::Sqrt, x, Saved::Output); }
Tensor rsqrt(const Tensor& x) {
  return unary_op(AutocastOp::Rsqrt, UnaryOp::Rsqrt, x, Saved::Output);
}

Tensor pow(const Tensor& x_in, double exponent) {
  const auto [x] = autocast_args(AutocastOp::Pow, x_in);
  ops_detail::check_float("pow", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.suggest_memory_format());
  {
    NoGrad no_grad;
    const Tensor p = opmath_scalar(exponent, x.dtype());
    capture::launch("pow", {&x, &p}, {&out}, [](const capture::KernelArgs& k) {
      kernels::binary(BinaryOp::Pow, k.in(0), k.in(1), k.out(0));
    });
  }
  ops_detail::record_backward<PowBackward>({&x}, {&out}, [&](PowBackward& node) {
    node.x = x.detach();
    node.p = exponent;
  });
  return out;
}

Tensor clamp(const Tensor& x_in, double lo, double hi) {
  const auto [x] = autocast_args(AutocastOp::Clamp, x_in);
  ops_detail::check_float("clamp", x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.suggest_memory_format());
  {
    NoGrad no_grad;
    capture::launch(
        "clamp", {&x}, {&out},
        [lo, hi](const capture::KernelArgs& k) { kernels::clamp(k.in(0), lo, hi, k.out(0)); },
        capture::Aliasing::Elementwise);
  }
  ops_detail::record_backward<ClampBackward>({&x}, {&out}, [&](ClampBackward& node) {
    node.x = x.detach();
    node.lo = lo;
    node.hi = hi;
  });
  return out;
}

}  // namespace mixprec
