// The _mixprec extension module: errors, thread-local modes as context managers, and the parts
// bound in the other files of this folder. The pure-Python package around it is python/mixprec/.
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <thread>

#include "bindings.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::python {
namespace {

// A C++ RAII guard held open between a `with` block's __enter__ and __exit__. Guards are
// thread-local and nest, so one must close on the thread that opened it; closing elsewhere
// would restore another thread's state, and is refused.
template <typename Guard>
class ModeGuard {
 public:
  template <typename... Args>
  void enter(Args... args) {
    MIXPREC_CHECK(!guard_.has_value(), "[mode] this guard is already entered");
    guard_.emplace(args...);
    thread_ = std::this_thread::get_id();
  }
  void exit() {
    if (!guard_.has_value()) return;
    MIXPREC_CHECK(thread_ == std::this_thread::get_id(),
                  "[mode] a mode guard must be exited on the thread that entered it");
    guard_.reset();
  }

 private:
  std::optional<Guard> guard_;
  std::thread::id thread_;
};

using AutocastGuard = ModeGuard<amp::Autocast>;
using NoGradGuard = ModeGuard<NoGrad>;
using EnableGradGuard = ModeGuard<EnableGrad>;
using InferenceGuard = ModeGuard<InferenceMode>;

}  // namespace

void bind_modes(nb::module_& m) {
  nb::class_<AutocastGuard>(m, "_AutocastGuard")
      .def(nb::init<>())
      .def(
          "enter",
          [](AutocastGuard& g, nb::handle dtype, bool enabled) {
            g.enter(dtype_arg(dtype), enabled);
          },
          nb::arg("dtype"), nb::arg("enabled"))
      .def("exit", &AutocastGuard::exit);
  nb::class_<NoGradGuard>(m, "_NoGradGuard")
      .def(nb::init<>())
      .def("enter", [](NoGradGuard& g) { g.enter(); })
      .def("exit", &NoGradGuard::exit);
  nb::class_<EnableGradGuard>(m, "_EnableGradGuard")
      .def(nb::init<>())
      .def("enter", [](EnableGradGuard& g) { g.enter(); })
      .def("exit", &EnableGradGuard::exit);
  nb::class_<InferenceGuard>(m, "_InferenceModeGuard")
      .def(nb::init<>())
      .def("enter", [](InferenceGuard& g) { g.enter(); })
      .def("exit", &InferenceGuard::exit);
  m.def("is_autocast_enabled", &amp::autocast_enabled, "On the calling thread.");
  m.def("get_autocast_dtype", &amp::autocast_dtype);
  m.def("is_grad_enabled", &grad_enabled, "On the calling thread.");
}

}  // namespace mixprec::python

NB_MODULE(_mixprec, m) {
  namespace py = mixprec::python;
  m.doc() = "mixprec's C++ engine (docs/PYTHON.md); import the package `mixprec` instead.";
  // Every user mistake the C++ API reports keeps its message ("[matmul] ..."); RuntimeError as
  // the base, as PyTorch raises for shape and dtype errors.
  nanobind::exception<mixprec::Error>(m, "Error", PyExc_RuntimeError);
  py::bind_tensor(m);
  py::bind_interop(m);
  py::bind_ops(m);
  py::bind_modes(m);
  py::bind_optim(m);
  py::bind_nn(m);
  py::bind_video(m);
  py::bind_gpt(m);
  py::bind_stream(m);
  py::bind_graph(m);
  m.def(
      "as_dtype", [](nanobind::handle value) { return py::dtype_arg(value); },
      nanobind::arg("dtype"), "A DType from a DType or a name ('bf16', 'float32', ...).");
  m.def(
      "kernel_level", [] { return std::string(mixprec::isa_name(mixprec::active_isa())); },
      "The SIMD level the kernels run at on this machine (MIXPREC_ISA forces one).");
}
