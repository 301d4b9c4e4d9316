// The functional API (ops/functional.h) bound one to one. The GIL is released around each call:
// kernels may run long and spread over threads, and other Python threads keep running. Memory
// borrowed from Python that an op drops meanwhile is released under the GIL by its owner.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
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

// The number in a Python operator or op call (a + 1.0, 2 * a, mp.add(a, 3)): a bool, int or
// float, or a numpy scalar. Anything else is not a number (nullopt), so the operator returns
// NotImplemented and Python tries the other operand or raises its TypeError.
struct Number {
  double value;
  bool is_float;  // a float makes an integer tensor f32 first (PyTorch's promotion)
};

std::optional<Number> number_arg(nb::handle x) {
  PyObject* o = x.ptr();
  if (PyFloat_Check(o)) return Number{PyFloat_AS_DOUBLE(o), true};
  if (PyLong_Check(o)) {
    const double v = PyLong_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return Number{v, false};
  }
  // numpy scalars (np.float32(2), np.int64(3)), not arrays. Held for the process's lifetime.
  static const nb::handle generic =
      nb::object(nb::module_::import_("numpy").attr("generic")).release();
  if (PyObject_IsInstance(o, generic.ptr()) == 1) {
    const char kind = nb::cast<std::string>(x.attr("dtype").attr("kind"))[0];
    if (kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b')
      return Number{nb::cast<double>(x.attr("__float__")()), kind == 'f'};
  }
  return std::nullopt;
}

// PyTorch's rule for a Python scalar: it never changes a floating tensor's dtype; a float with
// an integer or bool tensor computes in f32 (the default dtype). An int with an integer tensor
// stays integer in PyTorch; mixprec has no integer arithmetic, so the op reports that.
Tensor scalar_operand_tensor(const Tensor& a, const Number& s) {
  return s.is_float && !is_floating(a.dtype()) ? a.to(DType::F32) : a;
}

// One arithmetic operator: between tensors, and with a number on either side.
struct Arith {
  const char *name, *method, *reflected_method;
  Tensor (*tensors)(const Tensor&, const Tensor&);
  Tensor (*tensor_number)(const Tensor&, double);
  Tensor (*number_tensor)(double, const Tensor&);
};

const Arith kArith[] = {
    {"add", "__add__", "__radd__", [](const Tensor& a, const Tensor& b) { return add(a, b); },
     [](const Tensor& a, double s) { return add(a, s); },
     [](double s, const Tensor& a) { return add(a, s); }},
    {"sub", "__sub__", "__rsub__", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
     [](const Tensor& a, double s) { return sub(a, s); },
     [](double s, const Tensor& a) { return sub(s, a); }},
    {"mul", "__mul__", "__rmul__", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
     [](const Tensor& a, double s) { return mul(a, s); },
     [](double s, const Tensor& a) { return mul(a, s); }},
    {"div", "__truediv__", "__rtruediv__",
     [](const Tensor& a, const Tensor& b) { return div(a, b); },
     [](const Tensor& a, double s) { return div(a, s); },
     [](double s, const Tensor& a) { return div(s, a); }},
};

// self op other (other op self when reflected); nullopt when other is neither a Tensor nor a
// number. The GIL is released around the op.
std::optional<Tensor> arith(const Arith& op, const Tensor& self, nb::handle other,
                            bool reflected) {
  if (nb::isinstance<Tensor>(other)) {
    const Tensor& b = nb::cast<const Tensor&>(other);
    nb::gil_scoped_release release;
    return reflected ? op.tensors(b, self) : op.tensors(self, b);
  }
  const std::optional<Number> s = number_arg(other);
  if (!s) return std::nullopt;
  nb::gil_scoped_release release;
  const Tensor a = scalar_operand_tensor(self, *s);
  return reflected ? op.number_tensor(s->value, a) : op.tensor_number(a, s->value);
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
  // add, sub, mul, div: functions (b a tensor or a number) and Tensor's operators (a number on
  // either side). A number is applied in f32 (f64 for f64) and never changes a floating
  // tensor's dtype (DESIGN.md, opmath; PyTorch's rule for Python scalars).
  nb::handle tensor_class = nb::type<Tensor>();
  for (const Arith& op : kArith) {
    m.def(
        op.name,
        [&op](const Tensor& a, nb::handle b) {
          std::optional<Tensor> out = arith(op, a, b, false);
          if (!out)
            throw nb::type_error((std::string("[") + op.name + "] b must be a Tensor or a number, got " +
                                  nb::type_name(b.type()).c_str())
                                     .c_str());
          return std::move(*out);
        },
        nb::arg("a"), nb::arg("b"));
    for (const bool reflected : {false, true})
      nb::cpp_function_def(
          [&op, reflected](const Tensor& self, nb::handle other) -> nb::object {
            std::optional<Tensor> out = arith(op, self, other, reflected);
            return out ? nb::cast(std::move(*out)) : nb::borrow(Py_NotImplemented);
          },
          nb::scope(tensor_class), nb::name(reflected ? op.reflected_method : op.method),
          nb::is_method(), nb::is_operator());
  }
  nb::cpp_function_def(
      [](const Tensor& self, nb::handle exponent) -> nb::object {
        const std::optional<Number> p = number_arg(exponent);
        if (!p) return nb::borrow(Py_NotImplemented);
        const Tensor x = scalar_operand_tensor(self, *p);
        Tensor out;
        {
          nb::gil_scoped_release release;
          out = pow(x, p->value);
        }
        return nb::cast(std::move(out));
      },
      nb::scope(tensor_class), nb::name("__pow__"), nb::is_method(), nb::is_operator());
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
