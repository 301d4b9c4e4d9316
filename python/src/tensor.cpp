// mixprec.Tensor: the C++ Tensor handle itself (a Python Tensor is a copy of the handle, so it
// shares storage and autograd state exactly as C++ copies do), its views, and the protocols that
// let numpy and DLPack consumers see its memory without a copy.
#include <Python.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mixprec/core/random.h"

namespace mixprec::python {
namespace {

nb::tuple int_tuple(const std::vector<int64_t>& values, int64_t scale = 1) {
  nb::object tuple = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(values.size())));
  if (!tuple.is_valid()) throw nb::python_error();
  for (std::size_t i = 0; i < values.size(); ++i)
    PyTuple_SET_ITEM(tuple.ptr(), i, PyLong_FromLongLong(values[i] * scale));
  return nb::borrow<nb::tuple>(tuple);
}

// t.view(2, 3), t.view((2, 3)) and t.view([2, 3]) all mean the same shape, as in PyTorch.
std::vector<int64_t> int_args(const nb::args& args) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr()))
    return nb::cast<std::vector<int64_t>>(args[0]);
  return nb::cast<std::vector<int64_t>>(args);
}

// Python indexing onto views: ints select (dropping the dim), slices with a positive step
// slice, None inserts a size-1 dim, one Ellipsis stands for the dims not named.
Tensor index(const Tensor& t, nb::handle key) {
  std::vector<nb::handle> items;
  if (PyTuple_Check(key.ptr())) {
    for (nb::handle item : nb::borrow<nb::tuple>(key)) items.push_back(item);
  } else {
    items.push_back(key);
  }
  int64_t named = 0;  // dims the key consumes
  for (nb::handle item : items)
    if (PyLong_Check(item.ptr()) || PySlice_Check(item.ptr())) ++named;
  MIXPREC_CHECK(named <= t.dim(), "[index] too many indices (", named, ") for a tensor of ",
                t.dim(), " dims");
  Tensor out = t;
  int64_t dim = 0;
  bool seen_ellipsis = false;
  for (nb::handle item : items) {
    if (PyLong_Check(item.ptr())) {
      int overflow = 0;
      const long long i = PyLong_AsLongLongAndOverflow(item.ptr(), &overflow);
      if (overflow != 0) throw nb::index_error("[index] index out of the int64 range");
      out = out.select(dim, i);
    } else if (PySlice_Check(item.ptr())) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(item.ptr(), &start, &stop, &step) != 0) throw nb::python_error();
      MIXPREC_CHECK(step > 0, "[index] slice step must be positive, got ", step);
      out = out.slice(dim, start, stop, step);
      ++dim;
    } else if (item.is_none()) {
      out = out.unsqueeze(dim);
      ++dim;
    } else if (item.ptr() == Py_Ellipsis) {
      MIXPREC_CHECK(!seen_ellipsis, "[index] only one Ellipsis (...) is allowed");
      seen_ellipsis = true;
      dim += t.dim() - named;
    } else {
      throw nb::type_error(("[index] tensors are indexed by ints, slices, None and ..., got " +
                            std::string(nb::type_name(item.type()).c_str()))
                               .c_str());
    }
  }
  return out;
}

nb::dict array_interface(const Tensor& t) {
  MIXPREC_CHECK(t.defined(), "[__array_interface__] undefined tensor");
  nb::dict d;
  d["version"] = 3;
  d["shape"] = int_tuple(t.shape());
  d["typestr"] = array_typestr(t.dtype());
  // The data pointer of an empty tensor may be null, which numpy refuses; no element is
  // addressed through it then, so any aligned non-null address serves.
  const auto address = t.numel() == 0 ? static_cast<std::uintptr_t>(t.element_size())
                                      : reinterpret_cast<std::uintptr_t>(t.data_ptr());
  d["data"] = nb::make_tuple(nb::int_(address), false);
  if (t.is_contiguous())
    d["strides"] = nb::none();
  else
    d["strides"] = int_tuple(t.strides(), static_cast<int64_t>(t.element_size()));
  return d;
}

}  // namespace

DType dtype_arg(nb::handle value) {
  if (nb::isinstance<DType>(value)) return nb::cast<DType>(value);
  if (PyUnicode_Check(value.ptr())) return parse_dtype(nb::cast<std::string>(value));
  throw nb::type_error(("expected a dtype (mixprec.DType or a name such as 'bf16'), got " +
                        std::string(nb::type_name(value.type()).c_str()))
                           .c_str());
}

const char* array_typestr(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return "<f8";
    case DType::F32:
      return "<f4";
    case DType::F16:
      return "<f2";
    case DType::BF16:
      return "<u2";  // the raw bits: numpy has no bfloat16 of its own
    case DType::I64:
      return "<i8";
    case DType::I32:
      return "<i4";
    case DType::U8:
      return "|u1";
    case DType::Bool:
      return "|b1";
  }
  MIXPREC_ASSERT(false);
  return "";
}

void bind_tensor(nb::module_& m) {
  nb::enum_<DType>(m, "DType", "Element types; also accepted by name ('f32', 'bfloat16', ...).")
      .value("f64", DType::F64)
      .value("f32", DType::F32)
      .value("f16", DType::F16)
      .value("bf16", DType::BF16)
      .value("i64", DType::I64)
      .value("i32", DType::I32)
      .value("u8", DType::U8)
      .value("bool", DType::Bool);

  nb::class_<Tensor> t(m, "Tensor",
                       "A strided view on shared storage (mixprec::Tensor). Copies of the handle "
                       "share memory; views never copy.");
  t.def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("shape", [](const Tensor& x) { return int_tuple(x.shape()); })
      .def_prop_ro(
          "strides", [](const Tensor& x) { return int_tuple(x.strides()); },
          "Element strides (numpy's are in bytes).")
      .def_prop_ro("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def(
          "size", [](const Tensor& x, int64_t d) { return x.size(d); }, nb::arg("dim"))
      .def_prop_ro("element_size", &Tensor::element_size)
      .def_prop_ro("nbytes", &Tensor::nbytes)
      .def_prop_ro("storage_offset", &Tensor::storage_offset)
      .def_prop_ro(
          "data_ptr",
          [](const Tensor& x) { return reinterpret_cast<std::uintptr_t>(x.data_ptr()); },
          "Address of the first element, as an int (to check that no copy was made).")
      .def("is_contiguous", [](const Tensor& x) { return x.is_contiguous(); })
      .def("shares_storage", &Tensor::shares_storage, nb::arg("other"))
      .def("__len__",
           [](const Tensor& x) {
             MIXPREC_CHECK(x.dim() > 0, "[len] a 0-d tensor has no length");
             return x.size(0);
           })
      .def("__repr__", &Tensor::to_string)
      // ---- views ----
      .def("__getitem__", &index, nb::arg("key"))
      .def(
          "__setitem__",
          [](const Tensor& x, nb::handle key, nb::handle value) {
            const Tensor target = index(x, key);
            if (nb::isinstance<Tensor>(value))
              target.copy_(nb::cast<const Tensor&>(value));
            else
              target.fill_(nb::cast<double>(value));
          },
          nb::arg("key"), nb::arg("value"))
      .def("slice", &Tensor::slice, nb::arg("dim"), nb::arg("start"), nb::arg("end") = Tensor::kEnd,
           nb::arg("step") = 1)
      .def("select", &Tensor::select, nb::arg("dim"), nb::arg("index"))
      .def("narrow", &Tensor::narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"))
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def("t", &Tensor::t)
      .def_prop_ro("T", &Tensor::t)
      .def("permute", [](const Tensor& x, nb::args dims) { return x.permute(int_args(dims)); })
      .def("view", [](const Tensor& x, nb::args shape) { return x.view(int_args(shape)); })
      .def("reshape", [](const Tensor& x, nb::args shape) { return x.reshape(int_args(shape)); })
      .def("expand", [](const Tensor& x, nb::args shape) { return x.expand(int_args(shape)); })
      .def(
          "squeeze",
          [](const Tensor& x, nb::handle dim) {
            return dim.is_none() ? x.squeeze() : x.squeeze(nb::cast<int64_t>(dim));
          },
          nb::arg("dim") = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", &Tensor::flatten, nb::arg("start_dim") = 0, nb::arg("end_dim") = -1)
      .def("as_strided", &Tensor::as_strided, nb::arg("shape"), nb::arg("strides"),
           nb::arg("storage_offset") = 0)
      // ---- copies ----
      .def("contiguous", [](const Tensor& x) { return x.contiguous(); })
      .def("clone", [](const Tensor& x) { return x.clone(); })
      .def(
          "to", [](const Tensor& x, nb::handle dtype) { return x.to(dtype_arg(dtype)); },
          nb::arg("dtype"), "Same tensor for the same dtype, else a converted copy (RNE).")
      .def(
          "copy_", [](const Tensor& x, const Tensor& src) { return x.copy_(src); }, nb::arg("src"))
      .def(
          "fill_", [](const Tensor& x, double v) { return x.fill_(v); }, nb::arg("value"))
      .def("zero_", [](const Tensor& x) { return x.zero_(); })
      .def("item",
           [](const Tensor& x) -> nb::object {
             if (is_floating(x.dtype())) return nb::float_(x.item<double>());
             if (x.dtype() == DType::Bool) return nb::bool_(x.item<double>() != 0.0);
             return nb::int_(x.item<int64_t>());
           })
      // ---- autograd ----
      .def_prop_rw("requires_grad", &Tensor::requires_grad,
                   [](const Tensor& x, bool on) { x.requires_grad_(on); })
      .def(
          "requires_grad_", [](const Tensor& x, bool on) { return x.requires_grad_(on); },
          nb::arg("requires_grad") = true)
      .def_prop_ro("grad",
                   [](const Tensor& x) -> nb::object {
                     const Tensor g = x.grad();
                     if (!g.defined()) return nb::none();
                     return nb::cast(g);
                   })
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def("zero_grad", &Tensor::zero_grad)
      .def("detach", &Tensor::detach)
      .def(
          "backward",
          [](const Tensor& x, nb::handle gradient, bool retain_graph) {
            const Tensor g = gradient.is_none() ? Tensor() : nb::cast<Tensor>(gradient);
            nb::gil_scoped_release release;
            if (!g.defined() && !retain_graph)
              x.backward();
            else
              x.backward(g, retain_graph);
          },
          nb::arg("gradient") = nb::none(), nb::arg("retain_graph") = false)
      // ---- interop ----
      .def_prop_ro("__array_interface__", &array_interface)
      .def("__dlpack__",
           [](const Tensor& x, nb::kwargs kwargs) {
             // The standard's keywords: stream (None or -1 on the CPU), max_version (the legacy
             // capsule is always acceptable), dl_device (must be the CPU), copy (True copies).
             Tensor out = x;
             if (kwargs.contains("stream")) {
               nb::handle s = kwargs["stream"];
               if (!s.is_none() && nb::cast<int64_t>(s) != -1)
                 throw nb::value_error("[__dlpack__] stream must be None or -1 for CPU tensors");
             }
             if (kwargs.contains("dl_device")) {
               nb::handle dev = kwargs["dl_device"];
               if (!dev.is_none() && nb::cast<int>(nb::cast<nb::tuple>(dev)[0]) != 1)
                 throw nb::buffer_error(
                     "[__dlpack__] mixprec tensors can only be exported to the CPU");
             }
             if (kwargs.contains("copy") && !kwargs["copy"].is_none() &&
                 nb::cast<bool>(kwargs["copy"]))
               out = x.clone();
             return to_dlpack(out);
           })
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); });

  // ---- creation ----
  // Every (shape, dtype) factory, one table: the random ones draw from the default generator.
  using Factory = Tensor (*)(const Shape&, DType);
  const std::pair<const char*, Factory> factories[] = {
      {"empty", [](const Shape& s, DType d) { return Tensor::empty(s, d); }},
      {"zeros", [](const Shape& s, DType d) { return Tensor::zeros(s, d); }},
      {"ones", [](const Shape& s, DType d) { return Tensor::ones(s, d); }},
      {"rand", [](const Shape& s, DType d) { return Tensor::rand(s, d); }},  // [0, 1)
      {"randn", [](const Shape& s, DType d) { return Tensor::randn(s, d); }},
  };
  for (const auto& [name, make] : factories)
    m.def(
        name,
        [make](std::vector<int64_t> shape, nb::handle dtype) {
          return make(shape, dtype_arg(dtype));
        },
        nb::arg("shape"), nb::arg("dtype") = "f32");
  m.def(
      "full",
      [](std::vector<int64_t> shape, double value, nb::handle dtype) {
        return Tensor::full(shape, value, dtype_arg(dtype));
      },
      nb::arg("shape"), nb::arg("value"), nb::arg("dtype") = "f32");
  m.def(
      "arange",
      [](double start, nb::handle end, double step, nb::handle dtype) {
        if (end.is_none()) return Tensor::arange(0.0, start, step, dtype_arg(dtype));
        return Tensor::arange(start, nb::cast<double>(end), step, dtype_arg(dtype));
      },
      nb::arg("start"), nb::arg("end") = nb::none(), nb::arg("step") = 1.0,
      nb::arg("dtype") = "f32");
  m.def(
      "manual_seed", [](uint64_t seed) { manual_seed(seed); }, nb::arg("seed"),
      "Reseeds the default generator (bit-identical draws on every machine).");
}

}  // namespace mixprec::python
