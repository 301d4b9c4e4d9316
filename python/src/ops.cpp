// The functional API (ops/functional.h) bound one to one. The GIL is released around each call:
// kernels may run long and spread over threads, and other Python threads keep running. Memory
// borrowed from Python that an op drops meanwhile is released under the GIL by its owner.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/attention.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"

namespace mixprec::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;

// Optional tensor arguments: None is the C++ API's undefined Tensor.
Tensor optional_tensor(nb::handle value) {
  return value.is_none() ? Tensor() : nb::cast<Tensor>(value);
}

std::vector<int64_t> dims_arg(nb::handle dim) {
  if (dim.is_none()) return {};
  if (PyLong_Check(dim.ptr())) return {nb::cast<int64_t>(dim)};
  return nb::cast<std::vector<int64_t>>(dim);
}

kernels::Reduction reduction_arg(const std::string& name) {
  if (name == "mean") return kernels::Reduction::Mean;
  if (name == "sum") return kernels::Reduction::Sum;
  if (name == "none") return kernels::Reduction::None;
  throw Error("[loss] reduction must be 'mean', 'sum' or 'none', got '" + name + "'");
}

}  // namespace

void bind_ops(nb::module_& m) {
  using Unary = Tensor (*)(const Tensor&);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  m.def("add", static_cast<Binary>(&mixprec::add), nb::arg("a"), nb::arg("b"), Release());
  m.def("sub", static_cast<Binary>(&mixprec::sub), nb::arg("a"), nb::arg("b"), Release());
  m.def("mul", static_cast<Binary>(&mixprec::mul), nb::arg("a"), nb::arg("b"), Release());
  m.def("mul", static_cast<Tensor (*)(const Tensor&, double)>(&mixprec::mul), nb::arg("a"),
        nb::arg("s"), Release(), "a * s with the scalar applied in f32 (never rounded first).");
  m.def("div", static_cast<Binary>(&mixprec::div), nb::arg("a"), nb::arg("b"), Release());
  m.def("matmul", &matmul, nb::arg("a"), nb::arg("b"), Release());
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, nb::handle b) {
        const Tensor bias = optional_tensor(b);
        nb::gil_scoped_release release;
        return linear(x, w, bias);
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(),
      "x @ weight.T + bias (weight is [out, in], as in PyTorch).");
  for (auto [name, fn] : {std::pair<const char*, Unary>{"neg", &mixprec::neg},
                          {"exp", &mixprec::exp},
                          {"log", &mixprec::log},
                          {"relu", &mixprec::relu},
                          {"sqrt", &mixprec::sqrt},
                          {"rsqrt", &mixprec::rsqrt},
                          {"silu", &mixprec::silu},
                          {"sigmoid", &mixprec::sigmoid},
                          {"tanh", &mixprec::tanh}})
    m.def(name, fn, nb::arg("x"), Release());
  m.def(
      "gelu",
      [](const Tensor& x, const std::string& approximate) {
        MIXPREC_CHECK(approximate == "none" || approximate == "tanh",
                      "[gelu] approximate must be 'none' or 'tanh', got '", approximate, "'");
        nb::gil_scoped_release release;
        return gelu(x, approximate == "tanh" ? GeluApproximation::Tanh : GeluApproximation::None);
      },
      nb::arg("x"), nb::arg("approximate") = "none");
  m.def("pow", &mixprec::pow, nb::arg("x"), nb::arg("exponent"), Release());
  m.def("clamp", &mixprec::clamp, nb::arg("x"), nb::arg("min"), nb::arg("max"), Release());
  m.def(
      "sum",
      [](const Tensor& x, nb::handle dim, bool keepdim) {
        const std::vector<int64_t> dims = dims_arg(dim);
        nb::gil_scoped_release release;
        return sum(x, dims, keepdim);
      },
      nb::arg("x"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false,
      "Accumulates in f32 (f64 for f64) and rounds once.");
  m.def(
      "mean",
      [](const Tensor& x, nb::handle dim, bool keepdim) {
        const std::vector<int64_t> dims = dims_arg(dim);
        nb::gil_scoped_release release;
        return mean(x, dims, keepdim);
      },
      nb::arg("x"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
  m.def("softmax", &softmax, nb::arg("x"), nb::arg("dim"), Release());
  m.def("log_softmax", &log_softmax, nb::arg("x"), nb::arg("dim"), Release());
  m.def(
      "layer_norm",
      [](const Tensor& x, std::vector<int64_t> shape, nb::handle w, nb::handle b, double eps) {
        const Tensor weight = optional_tensor(w), bias = optional_tensor(b);
        nb::gil_scoped_release release;
        return layer_norm(x, shape, weight, bias, eps);
      },
      nb::arg("x"), nb::arg("normalized_shape"), nb::arg("weight") = nb::none(),
      nb::arg("bias") = nb::none(), nb::arg("eps") = 1e-5);
  m.def(
      "rms_norm",
      [](const Tensor& x, std::vector<int64_t> shape, nb::handle w, double eps) {
        const Tensor weight = optional_tensor(w);
        nb::gil_scoped_release release;
        return rms_norm(x, shape, weight, eps);
      },
      nb::arg("x"), nb::arg("normalized_shape"), nb::arg("weight") = nb::none(),
      nb::arg("eps") = 1e-6);
  m.def(
      "cross_entropy",
      [](const Tensor& logits, const Tensor& targets, const std::string& reduction) {
        const kernels::Reduction r = reduction_arg(reduction);
        nb::gil_scoped_release release;
        return cross_entropy(logits, targets, r);
      },
      nb::arg("logits"), nb::arg("targets"), nb::arg("reduction") = "mean");
  m.def(
      "mse_loss",
      [](const Tensor& a, const Tensor& b, const std::string& reduction) {
        const kernels::Reduction r = reduction_arg(reduction);
        nb::gil_scoped_release release;
        return mse_loss(a, b, r);
      },
      nb::arg("input"), nb::arg("target"), nb::arg("reduction") = "mean");
  m.def("embedding", &embedding, nb::arg("weight"), nb::arg("indices"), Release());
  m.def("cat", &cat, nb::arg("tensors"), nb::arg("dim") = 0, Release());
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, nb::handle mask,
         float scale) {
        AttentionParams params;
        params.causal = causal;
        params.mask = optional_tensor(mask);
        params.scale = scale;
        nb::gil_scoped_release release;
        return scaled_dot_product_attention(q, k, v, params);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("causal") = false,
      nb::arg("mask") = nb::none(), nb::arg("scale") = 0.0f,
      "Flash-style attention on [B, H, S, D]; scale 0 means 1/sqrt(D).");
  m.def(
      "conv2d",
      [](const Tensor& x, const Tensor& w, nb::handle b, int64_t stride, int64_t padding,
         int64_t dilation, int64_t groups) {
        const Tensor bias = optional_tensor(b);
        nb::gil_scoped_release release;
        return conv2d(x, w, bias, Conv2dParams{stride, padding, dilation, groups});
      },
      nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(), nb::arg("stride") = 1,
      nb::arg("padding") = 0, nb::arg("dilation") = 1, nb::arg("groups") = 1);
}

}  // namespace mixprec::python
