// mixprec.graph: graph capture and replay (graph/graph.h, docs/GRAPH.md) from Python. A Python
// function of tensors runs under the capture like a C++ one: the ops it calls go through the
// same front-ends, so the same kernels are recorded. python/mixprec/graph.py presents it.
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>
#include <vector>

#include "bindings.h"
#include "mixprec/graph/graph.h"

namespace mixprec::python {
namespace {

// The tensors a Python function returned: one tensor, or a list or tuple of them.
std::vector<Tensor> tensors_of(nb::handle result) {
  if (nb::isinstance<Tensor>(result)) return {nb::cast<Tensor>(result)};
  MIXPREC_CHECK(nb::isinstance<nb::list>(result) || nb::isinstance<nb::tuple>(result),
                "[graph] the captured function must return a Tensor or a list of Tensors");
  std::vector<Tensor> out;
  for (nb::handle item : result)
    out.push_back(item.is_none() ? Tensor() : nb::cast<Tensor>(item));
  return out;
}

// A Python callable (a list of tensors -> a tensor or a list of them) as a C++ graph function.
// The capture calls it on the calling thread, which holds the GIL.
graph::Function function_of(nb::callable fn) {
  return [fn](const std::vector<Tensor>& inputs) { return tensors_of(fn(inputs)); };
}

graph::CaptureOptions options_of(bool autograd, bool fold_constants, bool fuse_epilogues,
                                 bool validate) {
  graph::CaptureOptions options;
  options.autograd = autograd;
  options.fold_constants = fold_constants;
  options.fuse_epilogues = fuse_epilogues;
  options.validate = validate;
  return options;
}

std::map<std::string, double> memory_of(const graph::Graph& g) {
  const graph::MemoryPlan& m = g.memory();
  return {{"arena_bytes", static_cast<double>(m.arena_bytes)},
          {"input_bytes", static_cast<double>(m.input_bytes)},
          {"intermediate_bytes", static_cast<double>(m.intermediate_bytes)},
          {"eager_peak_bytes", static_cast<double>(m.eager_peak_bytes)},
          {"live_peak_bytes", static_cast<double>(m.live_peak_bytes)},
          {"in_place", static_cast<double>(m.in_place)},
          {"constant_bytes", static_cast<double>(m.constant_bytes)}};
}

}  // namespace

void bind_graph(nb::module_& m) {
  nb::class_<graph::Graph>(m, "Graph")
      .def(
          "run",
          [](graph::Graph& g, const std::vector<Tensor>& inputs) { return g.run(inputs); },
          nb::arg("inputs"),
          "Copies the inputs in and replays the kernels; the outputs are views of the graph's "
          "arena, valid until the next run (clone() what must outlive it).")
      .def_prop_ro("size", &graph::Graph::size, "kernels replayed")
      .def("ops", &graph::Graph::ops, "the replayed kernels' names, in order")
      .def_prop_ro("memory", &memory_of, "the memory plan, in bytes")
      .def_prop_ro("eliminated", &graph::Graph::eliminated)
      .def_prop_ro("folded", &graph::Graph::folded)
      .def_prop_ro("fused_epilogues", &graph::Graph::fused_epilogues)
      .def("to_string", [](const graph::Graph& g) { return g.to_string(); })
      .def("to_dot", &graph::Graph::to_dot)
      .def(
          "profile",
          [](const graph::Graph& g, int rounds) {
            std::vector<std::pair<std::string, double>> out;
            for (const graph::Graph::OpTime& t : g.profile(rounds)) out.emplace_back(t.op, t.ms);
            return out;
          },
          nb::arg("rounds") = 10, "milliseconds per replay per op name, slowest first");
  nb::class_<graph::CompiledFunction>(m, "_CompiledFunction")
      .def(
          "__init__",
          [](graph::CompiledFunction* self, nb::callable fn, bool autograd, bool fold_constants,
             bool fuse_epilogues, bool validate) {
            new (self) graph::CompiledFunction(
                function_of(std::move(fn)),
                options_of(autograd, fold_constants, fuse_epilogues, validate));
          },
          nb::arg("fn"), nb::arg("autograd"), nb::arg("fold_constants"),
          nb::arg("fuse_epilogues"), nb::arg("validate"))
      .def(
          "__call__",
          [](graph::CompiledFunction& f, const std::vector<Tensor>& inputs) { return f(inputs); },
          nb::arg("inputs"))
      .def_prop_ro("captures", &graph::CompiledFunction::captures)
      .def("last", &graph::CompiledFunction::last, nb::rv_policy::reference_internal)
      .def("clear", &graph::CompiledFunction::clear);
  m.def(
      "_graph_capture",
      [](nb::callable fn, const std::vector<Tensor>& inputs, bool autograd, bool fold_constants,
         bool fuse_epilogues, bool validate) {
        return graph::capture(function_of(std::move(fn)), inputs,
                              options_of(autograd, fold_constants, fuse_epilogues, validate));
      },
      nb::arg("fn"), nb::arg("inputs"), nb::arg("autograd"), nb::arg("fold_constants"),
      nb::arg("fuse_epilogues"), nb::arg("validate"));
  m.def(
      "_graph_with_gradients",
      [](nb::callable loss_fn, std::vector<Tensor> params) {
        graph::Function step = graph::with_gradients(function_of(std::move(loss_fn)),
                                                     std::move(params));
        return nb::cpp_function([step](const std::vector<Tensor>& inputs) { return step(inputs); });
      },
      nb::arg("loss_fn"), nb::arg("params"));
  m.def("_graph_set_gradients", &graph::set_gradients, nb::arg("params"), nb::arg("outputs"));
}

}  // namespace mixprec::python
