// Elementwise entry points: checks, broadcasting, the loop plan and the split over threads;
// the per-level kernels (elementwise_impl.h) run one strided run of elements at a time. Also
// the front-end helpers every non-GEMM kernel family shares (elementwise_frontend.h).
//
// The loop plan drops size-1 dims, orders the rest by the output's strides (largest
// outermost, so writes move forward through memory) and merges neighbours that are one flat
// run for every operand: contiguous or channels_last operands of one layout become a single
// run, and [N, C] + [C] becomes N runs of C.
#include "mixprec/kernels/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "../isa/family_kernels.h"
#include "elementwise_frontend.h"
#include "elementwise_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels {

namespace frontend {

void check_defined(const Tensor& t, std::string_view op, std::string_view role) {
  MIXPREC_CHECK(t.defined(), "[", op, "] ", role, " is an undefined tensor");
}

void check_floating(const Tensor& t, std::string_view op, std::string_view role) {
  check_defined(t, op, role);
  const DType d = t.dtype();
  MIXPREC_CHECK(d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64, "[", op,
                "] ", role, " has dtype ", dtype_name(d),
                ", expected a floating dtype (f32, f16, bf16 or f64)");
}

void check_shape(const Tensor& t, const Shape& expected, std::string_view op, std::string_view role,
                 std::string_view why) {
  MIXPREC_CHECK(t.shape() == expected, "[", op, "] ", role, " has shape ",
                shape_to_string(t.shape()), ", expected ", shape_to_string(expected), " (", why,
                ")");
}

bool overlaps(const Tensor& in, const Tensor& out) {
  if (!out.defined() || !in.shares_storage(out) || in.numel() == 0 || out.numel() == 0)
    return false;
  const bool same_view = in.storage_offset() == out.storage_offset() && in.shape() == out.shape() &&
                         in.strides() == out.strides() && in.dtype() == out.dtype();
  return !same_view;
}

Tensor staged_input(const Tensor& in, const Tensor& out, MemoryFormat format) {
  if (in.is_contiguous(format) && !overlaps(in, out)) return in;
  return in.clone(format);
}

StagedOutput::StagedOutput(const Tensor& out, MemoryFormat format) : out_(out) {
  work_ = out.is_contiguous(format) ? out : Tensor::empty(out.shape(), out.dtype(), format);
}

void StagedOutput::finish() const {
  if (!work_.shares_storage(out_)) out_.copy_(work_);
}

bool any_f64(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->dtype() == DType::F64) return true;
  return false;
}

}  // namespace frontend

namespace {

using elementwise_detail::ElementwiseKernels;
using elementwise_detail::kMaxOperands;
using elementwise_detail::MapKind;
using elementwise_detail::MapOp;
using elementwise_detail::Run;

constexpr std::array<std::string_view, kNumUnaryOps> kUnaryNames{
    "neg",   "abs",  "square",  "reciprocal", "exp",  "log",       "sqrt",
    "rsqrt", "relu", "sigmoid", "tanh",       "silu", "gelu_tanh", "gelu_erf"};
constexpr std::array<std::string_view, kNumBinaryOps> kBinaryNames{
    "add", "sub", "mul", "div", "pow", "maximum", "minimum"};

// Elements per thread chunk: below this a thread costs more than the work it would take.
constexpr int64_t kGrain = int64_t{1} << 14;

const ElementwiseKernels& kernels_for(bool f64) {
  using namespace elementwise_detail;
  return family_kernels<ElementwiseKernels, elementwise_scalar, elementwise_avx2,
                        elementwise_avx512, elementwise_f64>(f64);
}

// The loop after dim merging: shape[d] and, per operand, strides[d][k]; outermost first.
struct LoopPlan {
  Shape shape;
  std::vector<std::array<int64_t, kMaxOperands>> strides;
};

// The loop over `dims` in that order (outermost first), merging neighbours that every operand
// walks as one.
LoopPlan merge_dims(const Shape& shape, const std::vector<Tensor>& operands,
                    const std::vector<std::size_t>& dims) {
  LoopPlan plan;
  for (std::size_t d : dims) {
    std::array<int64_t, kMaxOperands> s{};
    for (std::size_t k = 0; k < operands.size(); ++k) s[k] = operands[k].strides()[d];
    if (!plan.shape.empty()) {
      auto& last = plan.strides.back();
      bool mergeable = true;
      for (std::size_t k = 0; k < operands.size(); ++k) mergeable &= last[k] == s[k] * shape[d];
      if (mergeable) {
        plan.shape.back() *= shape[d];
        last = s;
        continue;
      }
    }
    plan.shape.push_back(shape[d]);
    plan.strides.push_back(s);
  }
  return plan;
}

// Runs shorter than this cost more in per-run overhead (a kernel call, the index stepping)
// than the strided loads of a longer run do.
constexpr int64_t kShortRun = 16;

// Dims in the output's memory order, so that it is written in order. When that leaves a short
// innermost run (a channels_last output with 2 or 3 channels and an operand broadcast over
// them: runs of 3 elements, 4096 per 64 x 64 frame), the dim whose move innermost gives the
// longest run goes there instead; the operands strided along it are gathered.
LoopPlan plan_loop(const Shape& shape, const std::vector<Tensor>& operands) {
  std::vector<std::size_t> dims;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) dims.push_back(d);
  const Strides& out_strides = operands[0].strides();
  std::stable_sort(dims.begin(), dims.end(),
                   [&](std::size_t a, std::size_t b) { return out_strides[a] > out_strides[b]; });
  LoopPlan best = merge_dims(shape, operands, dims);
  if (best.shape.empty() || best.shape.back() >= kShortRun) return best;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    std::vector<std::size_t> order = dims;
    std::rotate(order.begin() + static_cast<std::ptrdiff_t>(i),
                order.begin() + static_cast<std::ptrdiff_t>(i) + 1, order.end());
    LoopPlan plan = merge_dims(shape, operands, order);
    if (plan.shape.back() > best.shape.back()) best = std::move(plan);
  }
  return best;
}

// Runs `op` over operands[0] (the output, shape already checked) and the inputs, which have
// been expanded to the output's shape.
void run_map(const MapOp& op, const std::vector<Tensor>& operands) {
  const Tensor& out = operands[0];
  const int64_t total = out.numel();
  if (total == 0) return;
  const bool f64 = std::any_of(operands.begin(), operands.end(),
                               [](const Tensor& t) { return t.dtype() == DType::F64; });
  const ElementwiseKernels& k = kernels_for(f64);
  const LoopPlan plan = plan_loop(out.shape(), operands);
  const std::size_t outer_dims = plan.shape.empty() ? 0 : plan.shape.size() - 1;
  const int64_t row = plan.shape.empty() ? 1 : plan.shape.back();
  const std::array<int64_t, kMaxOperands> row_stride =
      plan.shape.empty() ? std::array<int64_t, kMaxOperands>{} : plan.strides.back();

  Run base{};
  for (std::size_t i = 0; i < operands.size(); ++i) {
    base.data[i] = static_cast<char*>(operands[i].data_ptr());
    base.dtype[i] = operands[i].dtype();
    base.stride[i] = row_stride[i];
  }
  // Elements [lo, hi) in the plan's order: partial runs at both ends, whole runs between.
  parallel_for(0, total, kGrain, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> index(outer_dims);
    std::array<int64_t, kMaxOperands> offset{};  // elements, per operand
    int64_t rest = lo / row;
    for (auto d = static_cast<int64_t>(outer_dims) - 1; d >= 0; --d) {
      index[d] = rest % plan.shape[d];
      rest /= plan.shape[d];
      for (std::size_t k2 = 0; k2 < operands.size(); ++k2)
        offset[k2] += index[d] * plan.strides[d][k2];
    }
    int64_t col = lo % row;
    for (int64_t pos = lo; pos < hi;) {
      Run r = base;
      r.n = std::min(row - col, hi - pos);
      for (std::size_t i = 0; i < operands.size(); ++i)
        r.data[i] +=
            (offset[i] + col * row_stride[i]) * static_cast<int64_t>(dtype_size(r.dtype[i]));
      k.run(op, r);
      pos += r.n;
      col = 0;
      for (auto d = static_cast<int64_t>(outer_dims) - 1; d >= 0; --d) {
        for (std::size_t i = 0; i < operands.size(); ++i) offset[i] += plan.strides[d][i];
        if (++index[d] < plan.shape[d]) break;
        for (std::size_t i = 0; i < operands.size(); ++i)
          offset[i] -= plan.strides[d][i] * plan.shape[d];
        index[d] = 0;
      }
    }
  });
}

// Checks the output against the broadcast shape of the inputs, expands them to it and runs.
void map_broadcast(const MapOp& op, std::string_view name, const Tensor& out,
                   std::initializer_list<std::pair<const Tensor*, std::string_view>> inputs) {
  frontend::check_floating(out, name, "out");
  Shape shape;
  for (const auto& [t, role] : inputs) {
    frontend::check_floating(*t, name, role);
    shape = broadcast_shapes(shape, t->shape(), name);
  }
  frontend::check_shape(out, shape, name, "out",
                        inputs.size() == 1 ? "the input's shape" : "the inputs' broadcast shape");
  for (std::size_t d = 0; d < shape.size(); ++d)
    MIXPREC_CHECK(out.stride(static_cast<int64_t>(d)) != 0 || shape[d] == 1, "[", name,
                  "] out is a broadcast view (stride 0 in dim ", d, "): its elements overlap");
  std::vector<Tensor> operands{out};
  for (const auto& [t, role] : inputs) {
    const Tensor in = frontend::overlaps(*t, out) ? t->clone() : *t;
    operands.push_back(in.expand(shape));
  }
  run_map(op, operands);
}

}  // namespace

std::string_view unary_op_name(UnaryOp op) { return kUnaryNames[static_cast<std::size_t>(op)]; }
std::string_view binary_op_name(BinaryOp op) { return kBinaryNames[static_cast<std::size_t>(op)]; }

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  MapOp m;
  m.kind = MapKind::Unary;
  m.unary = op;
  map_broadcast(m, unary_op_name(op), out, {{&x, "x"}});
}

bool has_unary_backward(UnaryOp op) {
  return op == UnaryOp::Sigmoid || op == UnaryOp::Tanh || op == UnaryOp::Silu ||
         op == UnaryOp::GeluTanh || op == UnaryOp::GeluErf;
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out) {
  MIXPREC_CHECK(has_unary_backward(op), "[unary_backward] no derivative kernel for ",
                unary_op_name(op));
  MIXPREC_CHECK(x.shape() == grad.shape() && x.shape() == out.shape(), "[unary_backward] x ",
                shape_to_string(x.shape()), ", grad ", shape_to_string(grad.shape()), " and out ",
                shape_to_string(out.shape()), " must have one shape");
  MapOp m;
  m.kind = MapKind::UnaryGrad;
  m.unary = op;
  map_broadcast(m, "unary_backward", out, {{&x, "x"}, {&grad, "grad"}});
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  MapOp m;
  m.kind = MapKind::Binary;
  m.binary = op;
  map_broadcast(m, binary_op_name(op), out, {{&a, "a"}, {&b, "b"}});
}

void clamp(const Tensor& x, double lo, double hi, const Tensor& out) {
  MIXPREC_CHECK(!std::isnan(lo) && !std::isnan(hi), "[clamp] bounds must not be NaN, got lo ", lo,
                ", hi ", hi);
  MapOp m;
  m.kind = MapKind::Clamp;
  m.p0 = lo;
  m.p1 = hi;
  map_broadcast(m, "clamp", out, {{&x, "x"}});
}

void axpby(double alpha, const Tensor& x, double beta, const Tensor& y, const Tensor& out) {
  MapOp m;
  m.kind = MapKind::Axpby;
  m.p0 = alpha;
  m.p1 = beta;
  map_broadcast(m, "axpby", out, {{&x, "x"}, {&y, "y"}});
}

void bias_activation(const Tensor& x, const Tensor& bias, Activation act, const Tensor& out) {
  constexpr std::string_view kName = "bias_activation";
  frontend::check_floating(x, kName, "x");
  frontend::check_floating(bias, kName, "bias");
  MIXPREC_CHECK(x.dim() >= 1,
                "[bias_activation] x is 0-d, expected at least one dim (the channels)");
  const int64_t channel_dim = x.dim() >= 4 ? 1 : x.dim() - 1;
  const int64_t channels = x.size(channel_dim);
  MIXPREC_CHECK(bias.shape() == Shape{channels}, "[bias_activation] bias has shape ",
                shape_to_string(bias.shape()), ", expected [", channels, "] (dim ", channel_dim,
                " of x ", shape_to_string(x.shape()), ")");
  Shape bias_shape(static_cast<std::size_t>(x.dim() - channel_dim), 1);  // [C, 1, ...]
  bias_shape[0] = channels;
  const Tensor b = bias.view(bias_shape);
  MapOp m;
  m.kind = MapKind::BiasActivation;
  m.activation = act;
  map_broadcast(m, kName, out, {{&x, "x"}, {&b, "bias"}});
}

}  // namespace mixprec::kernels
