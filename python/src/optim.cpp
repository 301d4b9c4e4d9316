// The optimizers (optim/) and GradScaler (amp/grad_scaler.h), bound with PyTorch's keyword
// names. An optimizer holds copies of the parameter handles, so it updates the very tensors the
// Python code holds; 16-bit parameters get f32 master weights, as in C++.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mixprec/amp/grad_scaler.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/sgd.h"

namespace mixprec::python {
optim::Rounding rounding_arg(const std::string& name) {
  if (name == "nearest") return optim::Rounding::NearestEven;
  if (name == "stochastic") return optim::Rounding::Stochastic;
  throw Error("[optimizer] rounding must be 'nearest' or 'stochastic', got '" + name + "'");
}

namespace {

// An undefined tensor (no master weight for an f32 parameter) is None in Python.
nb::object maybe_tensor(const Tensor& t) { return t.defined() ? nb::cast(t) : nb::none(); }

}  // namespace

void bind_optim(nb::module_& m) {
  using optim::Optimizer;
  nb::class_<Optimizer>(m, "Optimizer", "Base of SGD, Adam and AdamW (optim/optimizer.h).")
      .def("step", &Optimizer::step, nb::call_guard<nb::gil_scoped_release>(),
           "One update of every parameter that has a gradient.")
      .def("zero_grad", &Optimizer::zero_grad, "Drops every parameter's gradient.")
      .def_prop_rw("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_prop_ro("params", &Optimizer::params)
      .def_prop_ro("rounding",
                   [](const Optimizer& o) {
                     return o.rounding() == optim::Rounding::Stochastic ? "stochastic" : "nearest";
                   })
      .def("step_count", &Optimizer::step_count, nb::arg("index"))
      .def(
          "master", [](const Optimizer& o, std::size_t i) { return maybe_tensor(o.master(i)); },
          nb::arg("index"), "The f32 master weight of a 16-bit parameter (None for others).")
      .def(
          "state",
          [](const Optimizer& o, std::size_t i, const std::string& name) {
            return maybe_tensor(o.state(i, name));
          },
          nb::arg("index"), nb::arg("name"), "A state tensor ('momentum_buffer', 'exp_avg', ...).")
      .def("__repr__", [](const Optimizer& o) {
        return std::string(o.type_name()) + "(" + std::to_string(o.params().size()) +
               " parameters, lr=" + std::to_string(o.lr()) + ")";
      });

  nb::class_<optim::SGD, Optimizer>(m, "SGD").def(
      "__init__",
      [](optim::SGD* self, std::vector<Tensor> params, double lr, double momentum,
         double weight_decay, bool nesterov, const std::string& rounding, uint64_t seed) {
        new (self) optim::SGD(std::move(params), {.lr = lr,
                                                  .momentum = momentum,
                                                  .weight_decay = weight_decay,
                                                  .nesterov = nesterov,
                                                  .rounding = rounding_arg(rounding),
                                                  .seed = seed});
      },
      nb::arg("params"), nb::arg("lr") = 0.01, nb::arg("momentum") = 0.0,
      nb::arg("weight_decay") = 0.0, nb::arg("nesterov") = false, nb::arg("rounding") = "nearest",
      nb::arg("seed") = 0);

  // Adam and AdamW take the same arguments; only the default weight decay differs (PyTorch's).
  const auto bind_adam = [&m]<typename Adam, typename Options>(const char* name,
                                                               double default_decay) {
    nb::class_<Adam, Optimizer>(m, name).def(
        "__init__",
        [](Adam* self, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
           double eps, double weight_decay, const std::string& rounding, uint64_t seed) {
          Options o;
          o.lr = lr;
          o.beta1 = betas.first;
          o.beta2 = betas.second;
          o.eps = eps;
          o.weight_decay = weight_decay;
          o.rounding = rounding_arg(rounding);
          o.seed = seed;
          new (self) Adam(std::move(params), o);
        },
        nb::arg("params"), nb::arg("lr") = 1e-3,
        nb::arg("betas") = std::pair<double, double>(0.9, 0.999), nb::arg("eps") = 1e-8,
        nb::arg("weight_decay") = default_decay, nb::arg("rounding") = "nearest",
        nb::arg("seed") = 0);
  };
  bind_adam.operator()<optim::AdamW, optim::AdamWOptions>("AdamW", 0.01);
  bind_adam.operator()<optim::Adam, optim::AdamOptions>("Adam", 0.0);

  nb::class_<amp::GradScaler>(m, "GradScaler",
                              "Dynamic loss scaling (PyTorch's state machine, amp/grad_scaler.h).")
      .def(
          "__init__",
          [](amp::GradScaler* self, double init_scale, double growth_factor, double backoff_factor,
             int64_t growth_interval, int64_t hysteresis, double min_scale, bool dynamic,
             bool enabled) {
            new (self) amp::GradScaler({.init_scale = init_scale,
                                        .growth_factor = growth_factor,
                                        .backoff_factor = backoff_factor,
                                        .growth_interval = growth_interval,
                                        .hysteresis = hysteresis,
                                        .min_scale = min_scale,
                                        .dynamic = dynamic,
                                        .enabled = enabled});
          },
          nb::arg("init_scale") = 65536.0, nb::arg("growth_factor") = 2.0,
          nb::arg("backoff_factor") = 0.5, nb::arg("growth_interval") = 2000,
          nb::arg("hysteresis") = 1, nb::arg("min_scale") = 1.0, nb::arg("dynamic") = true,
          nb::arg("enabled") = true)
      .def("scale", &amp::GradScaler::scale, nb::arg("loss"), "loss * scale, in f32.")
      .def("unscale_", &amp::GradScaler::unscale, nb::arg("optimizer"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("step", &amp::GradScaler::step, nb::arg("optimizer"),
           nb::call_guard<nb::gil_scoped_release>(),
           "Unscales if needed, then steps unless a gradient is inf/NaN; True if it stepped.")
      .def("update", &amp::GradScaler::update)
      .def("get_scale", &amp::GradScaler::get_scale)
      .def_prop_ro("skipped_steps", &amp::GradScaler::skipped_steps)
      .def_prop_ro("last_step_skipped", &amp::GradScaler::last_step_skipped)
      .def("state_dict", &amp::GradScaler::state_dict)
      .def("load_state_dict", &amp::GradScaler::load_state_dict, nb::arg("state"));
}

}  // namespace mixprec::python
