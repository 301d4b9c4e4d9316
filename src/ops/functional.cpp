// Softmax, losses, embedding, dropout and cat: front-ends and backward.
#include "mixprec/ops/functional.h"

#include <algorithm>
#include <cmath>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/elementwise.h"
#include "mixprec/kernels/embedding.h"
#include "mixprec/kernels/reduce.h"
#include "mixprec/kernels/softmax.h"
#include "mixprec/mode/grad_mode.h"
#include "op_util.h"

namespace mixprec {
namespace {

using kernels::BinaryOp;
using kernels::Reduction;

DType acc_dtype(const Tensor& t) { return t.dtype() == DType::F64 ? DType::F64 : DType::F32; }

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, DType dtype) {
  Tensor out = Tensor::empty(broadcast_shapes(a.shape(), b.shape(), "backward"), dtype);
  capture::launch("binary", {&a, &b}, {&out}, [op](const capture::KernelArgs& k) {
    kernels::binary(op, k.in(0), k.in(1), k.out(0));
  });
  return out;
}

Tensor sum_keep(const Tensor& x, int64_t dim) {
  Tensor out = Tensor::empty(kernels::reduced_shape(x.shape(), {dim}, true, "backward"), x.dtype());
  ops_detail::sum_into(x, {dim}, out);
  return out;
}

// softmax:     dx = y * (g - sum(g * y))      log_softmax: dx = g - exp(y) * sum(g)
struct SoftmaxBackward final : autograd::Node {
  Tensor y;
  int64_t dim;
  bool log;
  DType input_dtype;
  std::string_view name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = acc_dtype(y);
    const Tensor g = grads[0].to(acc), ya = y.to(acc);
    Tensor dx;
    if (log) {
      Tensor p = Tensor::empty(ya.shape(), acc);
      capture::launch("exp", {&ya}, {&p}, [](const capture::KernelArgs& k) {
        kernels::unary(kernels::UnaryOp::Exp, k.in(0), k.out(0));
      });
      dx = binary(BinaryOp::Sub, g, binary(BinaryOp::Mul, p, sum_keep(g, dim), acc), acc);
    } else {
      dx = binary(BinaryOp::Mul, ya,
                  binary(BinaryOp::Sub, g, sum_keep(binary(BinaryOp::Mul, g, ya, acc), dim), acc),
                  acc);
    }
    return {dx.to(input_dtype)};
  }
  void release_saved() override { y = Tensor(); }
};

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  ops_detail::check_float(log ? "log_softmax" : "softmax", x);
  Tensor out = Tensor::empty_like(x, MemoryFormat::Preserve);
  {
    NoGrad no_grad;
    capture::launch(log ? "log_softmax" : "softmax", {&x}, {&out},
                    [log, dim](const capture::KernelArgs& k) {
                      log ? kernels::log_softmax(k.in(0), dim, k.out(0))
                          : kernels::softmax(k.in(0), dim, k.out(0));
                    });
  }
  ops_detail::record_backward<SoftmaxBackward>({&x}, {&out}, [&](SoftmaxBackward& node) {
    node.y = out.detach();
    node.dim = normalize_dim(dim, x.dim(), "softmax");
    node.log = log;
    node.input_dtype = x.dtype();
  });
  return out;
}

// d loss / d logits[i, :] = w_i (softmax(logits_i) - target distribution_i), w_i the row's
// weight in the reduction (1/count for mean); ignored rows get 0 (kernels::cross_entropy_backward).
struct CrossEntropyBackward final : autograd::Node {
  Tensor logits, targets;
  kernels::CrossEntropyOptions options;  // the reduction included
  std::string_view name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor dx = Tensor::empty(logits.shape(), logits.dtype());
    capture::launch("cross_entropy_backward", {&logits, &targets, &grads[0]}, {&dx},
                    [options = options](const capture::KernelArgs& k) {
                      kernels::cross_entropy_backward(k.in(0), k.in(1), k.in(2), k.out(0),
                                                      options);
                    });
    return {dx, Tensor()};
  }
  void release_saved() override { logits = targets = Tensor(); }
};

// (a - b)^2 reduced: da = 2 (a - b) g / count, db = -da.
struct MseBackward final : autograd::Node {
  Tensor a, b;
  Reduction reduction;
  std::string_view name() const override { return "MseLossBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = acc_dtype(a);
    const double scale = reduction == Reduction::Mean ? 2.0 / static_cast<double>(a.numel()) : 2.0;
    Tensor diff = binary(BinaryOp::Sub, a, b, acc);
    Tensor da = binary(BinaryOp::Mul, diff, grads[0].to(acc), acc);
    capture::launch("axpby", {&da}, {&da}, [scale](const capture::KernelArgs& k) {
      kernels::axpby(scale, k.in(0), 0.0, k.in(0), k.out(0));
    });
    Tensor db = Tensor::empty(da.shape(), acc);
    capture::launch("neg", {&da}, {&db}, [](const capture::KernelArgs& k) {
      kernels::unary(kernels::UnaryOp::Neg, k.in(0), k.out(0));
    });
    return {da.to(a.dtype()), db.to(b.dtype())};
  }
  void release_saved() override { a = b = Tensor(); }
};

// Rows of the gradient added into the table rows they were read from (f32/f64 accumulation).
struct EmbeddingBackward final : autograd::Node {
  Tensor indices;
  Shape weight_shape;
  DType weight_dtype;
  std::string_view name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType acc = weight_dtype == DType::F64 ? DType::F64 : DType::F32;
    const int64_t d = weight_shape[1];
    const Tensor idx = indices.to(DType::I64).contiguous();
    const Tensor g = grads[0].to(acc).contiguous();
    Tensor dw = Tensor::empty(weight_shape, acc);
    capture::launch("embedding_backward", {&idx, &g}, {&dw}, [d](const capture::KernelArgs& k) {
      const Tensor& dw = k.out(0);
      visit_dtype(dw.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_floating_point_v<T>) {
          T* out = dw.data<T>();
          std::fill(out, out + dw.numel(), T(0));
          const int64_t* index = k.in(0).data<int64_t>();
          const T* g = k.in(1).data<T>();
          for (int64_t i = 0; i < k.in(0).numel(); ++i) {
            T* row = out + index[i] * d;
            const T* src = g + i * d;
            for (int64_t j = 0; j < d; ++j) row[j] += src[j];
          }
        }
      });
    });
    return {dw.to(weight_dtype), Tensor()};
  }
  void release_saved() override { indices = Tensor(); }
};

struct MaskBackward final : autograd::Node {  // dropout: g * mask (mask already scaled)
  Tensor mask;
  DType dtype;
  std::string_view name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    return {binary(BinaryOp::Mul, grads[0], mask, dtype)};
  }
  void release_saved() override { mask = Tensor(); }
};

struct CatBackward final : autograd::Node {  // slices of the gradient
  std::vector<int64_t> sizes;
  int64_t dim;
  std::string_view name() const override { return "CatBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    std::vector<Tensor> out;
    int64_t start = 0;
    for (int64_t s : sizes) {
      out.push_back(grads[0].narrow(dim, start, s));
      start += s;
    }
    return out;
  }
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::autocast_args(amp::AutocastOp::Softmax, x).get<0>(), dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(amp::autocast_args(amp::AutocastOp::LogSoftmax, x).get<0>(), dim, true);
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, Reduction reduction,
                     const kernels::CrossEntropyOptions& options) {
  const auto [logits] = amp::autocast_args(amp::AutocastOp::CrossEntropy, logits_in);
  ops_detail::check_float("cross_entropy", logits);
  kernels::CrossEntropyOptions o = options;
  o.reduction = reduction;
  Tensor out = Tensor::empty(reduction == Reduction::None ? Shape{logits.size(0)} : Shape{},
                             acc_dtype(logits));
  {
    NoGrad no_grad;
    capture::launch("cross_entropy", {&logits, &targets}, {&out},
                    [o](const capture::KernelArgs& k) {
                      kernels::cross_entropy(k.in(0), k.in(1), k.out(0), o);
                    });
  }
  ops_detail::record_backward<CrossEntropyBackward>({&logits, &targets}, {&out},
                                                    [&](CrossEntropyBackward& node) {
                                                      node.logits = logits.detach();
                                                      node.targets = targets.detach();
                                                      node.options = o;
                                                    });
  return out;
}

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in, Reduction reduction) {
  const auto [a, b] = amp::autocast_args(amp::AutocastOp::MSELoss, a_in, b_in);
  ops_detail::check_float("mse_loss", a);
  ops_detail::check_float("mse_loss", b);
  const DType out_dtype =
      a.dtype() == DType::F64 || b.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor out = Tensor::empty(reduction == Reduction::None ? a.shape() : Shape{}, out_dtype);
  {
    NoGrad no_grad;
    capture::launch("mse_loss", {&a, &b}, {&out}, [reduction](const capture::KernelArgs& k) {
      kernels::mse_loss(k.in(0), k.in(1), k.out(0), reduction);
    });
  }
  ops_detail::record_backward<MseBackward>({&a, &b}, {&out}, [&](MseBackward& node) {
    node.a = a.detach();
    node.b = b.detach();
    node.reduction = reduction;
  });
  return out;
}

Tensor embedding(const Tensor& weight_in, const Tensor& indices) {
  const auto [weight] = amp::autocast_args(amp::AutocastOp::Embedding, weight_in);
  ops_detail::check_float("embedding", weight);
  MIXPREC_CHECK(weight.dim() == 2, "[embedding] weight must be [V, D], got ",
                shape_to_string(weight.shape()));
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype());
  {
    NoGrad no_grad;
    capture::launch("embedding", {&weight, &indices}, {&out}, [](const capture::KernelArgs& k) {
      kernels::embedding(k.in(0), k.in(1), k.out(0));
    });
  }
  ops_detail::record_backward<EmbeddingBackward>({&weight, &indices}, {&out},
                                                 [&](EmbeddingBackward& node) {
                                                   node.indices = indices.detach();
                                                   node.weight_shape = weight.shape();
                                                   node.weight_dtype = weight.dtype();
                                                 });
  return out;
}

Tensor dropout(const Tensor& x_in, double p, bool training, Generator& gen) {
  const auto [x] = amp::autocast_args(amp::AutocastOp::Dropout, x_in);
  ops_detail::check_float("dropout", x);
  MIXPREC_CHECK(p >= 0.0 && p < 1.0, "[dropout] p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  Tensor mask;
  Tensor out;
  {
    NoGrad no_grad;
    const Tensor u = Tensor::rand(x.shape(), gen, DType::F32);
    mask = Tensor::empty(x.shape(), x.dtype());
    const Tensor uc = u.contiguous();
    Tensor m32 = Tensor::empty(x.shape(), DType::F32);
    const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
    for (int64_t i = 0; i < uc.numel(); ++i)
      m32.data<float>()[i] = uc.data<float>()[i] >= p ? keep_scale : 0.0f;
    mask.copy_(m32);
    out = binary(BinaryOp::Mul, x, mask, x.dtype());
  }
  ops_detail::record_backward<MaskBackward>({&x}, {&out}, [&](MaskBackward& node) {
    node.mask = mask;
    node.dtype = x.dtype();
  });
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim) {
  MIXPREC_CHECK(!tensors_in.empty(), "[cat] expected at least one tensor");
  std::vector<Tensor> tensors = tensors_in;
  if (amp::autocast_enabled()) amp::apply_autocast(amp::AutocastOp::Cat, tensors);
  const Tensor& first = tensors[0];
  const int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[static_cast<std::size_t>(d)] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    MIXPREC_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype(),
                  "[cat] tensors must share rank and dtype: ", shape_to_string(first.shape()), " ",
                  dtype_name(first.dtype()), " vs ", shape_to_string(t.shape()), " ",
                  dtype_name(t.dtype()));
    for (int64_t k = 0; k < t.dim(); ++k)
      MIXPREC_CHECK(k == d || t.size(k) == first.size(k), "[cat] shapes ",
                    shape_to_string(first.shape()), " and ", shape_to_string(t.shape()),
                    " differ outside dim ", d);
    sizes.push_back(t.size(d));
    shape[static_cast<std::size_t>(d)] += t.size(d);
  }
  const bool channels_last =
      first.dim() == 4 && first.is_contiguous(MemoryFormat::ChannelsLast) && !first.is_contiguous();
  Tensor out = Tensor::empty(shape, first.dtype(),
                             channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
  {
    NoGrad no_grad;
    int64_t start = 0;
    for (const Tensor& t : tensors) {
      out.narrow(d, start, t.size(d)).copy_(t);
      start += t.size(d);
    }
  }
  std::vector<const Tensor*> inputs;
  bool any = false;
  for (const Tensor& t : tensors) {
    inputs.push_back(&t);
    any = any || autograd::needs_grad({&t});
  }
  if (any) {
    auto node = std::make_shared<CatBackward>();
    node->sizes = sizes;
    node->dim = d;
    autograd::record(node, inputs, {&out});
  }
  return out;
}

const Tensor& index_copy_(const Tensor& self, int64_t dim, const Tensor& index,
                          const Tensor& source) {
  const char* op = "[index_copy_]";
  MIXPREC_CHECK(self.defined() && index.defined() && source.defined(), op,
                " expected defined tensors");
  const int64_t d = normalize_dim(dim, self.dim(), "index_copy_");
  MIXPREC_CHECK(index.dim() == 1 && (index.dtype() == DType::I64 || index.dtype() == DType::I32),
                op, " index must be a 1-D i64 or i32 tensor, got ", dtype_name(index.dtype()), " ",
                shape_to_string(index.shape()));
  Shape expected = self.shape();
  expected[static_cast<std::size_t>(d)] = index.size(0);
  MIXPREC_CHECK(source.shape() == expected && source.dtype() == self.dtype(), op, " source is ",
                dtype_name(source.dtype()), " ", shape_to_string(source.shape()), ", expected ",
                dtype_name(self.dtype()), " ", shape_to_string(expected));
  MIXPREC_CHECK(!self.requires_grad(), op,
                " writes in place and is not differentiable: self "
                "must not require gradients");
  capture::launch("index_copy", {&index, &source}, {&self}, [d](const capture::KernelArgs& a) {
    const Tensor &idx = a.in(0), &src = a.in(1), &dst = a.out(0);
    const int64_t n = idx.size(0), size = dst.size(d);
    auto at = [&](int64_t i) {
      return idx.dtype() == DType::I64 ? idx.data<int64_t>()[i * idx.stride(0)]
                                       : int64_t{idx.data<int32_t>()[i * idx.stride(0)]};
    };
    for (int64_t i = 0; i < n; ++i)  // every index first: a bad one writes nothing
      MIXPREC_CHECK(at(i) >= 0 && at(i) < size, "[index_copy_] index ", at(i),
                    " is out of range for dim ", d, " of size ", size);
    for (int64_t i = 0; i < n; ++i) dst.narrow(d, at(i), 1).copy_(src.narrow(d, i, 1));
  });
  return self;
}

}  // namespace mixprec
