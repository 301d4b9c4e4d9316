#include "mixprec/ops/reduce.h"

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
#include "op_util.h"

namespace mixprec {
namespace {

std::vector<int64_t> all_dims_if_empty(const Tensor& x, const std::vector<int64_t>& dims) {
  if (!dims.empty()) return dims;
  std::vector<int64_t> all(static_cast<std::size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) all[static_cast<std::size_t>(d)] = d;
  return all;
}

// The gradient of a sum is the incoming gradient broadcast back over the reduced dims, scaled
// (by 1/count for a mean).
struct SumBackward final : autograd::Node {
  Shape input_shape;
  DType input_dtype;
  Shape kept_shape;  // the output's shape with reduced dims kept as 1
  double scale;
  std::string_view name() const override { return scale == 1.0 ? "SumBackward" : "MeanBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor grad = g[0].reshape(kept_shape).expand(input_shape).contiguous();
    if (scale != 1.0) grad = mul(grad, scale);
    return {grad.dtype() == input_dtype ? grad : grad.to(input_dtype)};
  }
};

Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim, bool average) {
  const char* op = average ? "mean" : "sum";
  ops_detail::check_float(op, x);
  const std::vector<int64_t> dims = all_dims_if_empty(x, dims_in);
  Tensor out;
  int64_t count = 1;
  {
    NoGrad no_grad;
    out = Tensor::empty(kernels::reduced_shape(x.shape(), dims, keepdim, op), x.dtype());
    capture::launch(op, {&x}, {&out}, [average, dims, keepdim](const capture::KernelArgs& k) {
      average ? kernels::mean(k.in(0), dims, keepdim, k.out(0))
              : kernels::sum(k.in(0), dims, keepdim, k.out(0));
    });
    count = x.numel() / std::max<int64_t>(1, out.numel());
  }
  ops_detail::record_backward<SumBackward>({&x}, {&out}, [&](SumBackward& node) {
    node.input_shape = x.shape();
    node.input_dtype = x.dtype();
    node.kept_shape = kernels::reduced_shape(x.shape(), dims, true, op);
    node.scale = average ? 1.0 / static_cast<double>(count) : 1.0;
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(amp::autocast_args(amp::AutocastOp::Sum, x).get<0>(), dims, keepdim, false);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(amp::autocast_args(amp::AutocastOp::Mean, x).get<0>(), dims, keepdim, true);
}

}  // namespace mixprec
