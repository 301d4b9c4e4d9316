// mixprec.nn: the built-in modules (nn/layers.h) and module files (io/module_file.h). Modules
// are held by std::shared_ptr, so a Sequential made in Python shares its layers with the Python
// objects (and keeps them alive). Python subclasses with their own forward are not supported yet:
// Layer::forward is called from C++ without a trampoline.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mixprec/io/module_file.h"
#include "mixprec/nn/layers.h"
#include "mixprec/nn/module.h"

namespace mixprec::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;

// state_dict() as an ordered dict name -> tensor (the tensors themselves, not copies, as in
// PyTorch), and back.
nb::dict to_dict(const nn::NamedTensors& named) {
  nb::dict d;
  for (const auto& [name, tensor] : named) d[name.c_str()] = nb::cast(tensor);
  return d;
}

nn::NamedTensors from_dict(const nb::dict& d) {
  nn::NamedTensors named;
  for (auto [key, value] : d)
    named.emplace_back(nb::cast<std::string>(key), nb::cast<Tensor>(value));
  return named;
}

}  // namespace

// Bound into the extension's own namespace (not a submodule) so that its generated stubs stay
// one self-contained file; python/mixprec/nn.py presents them as mixprec.nn.
void bind_nn(nb::module_& m) {

  nb::class_<nn::Module>(m, "Module", "Base of every module (nn/module.h).")
      .def_prop_ro("type_name", [](const nn::Module& x) { return std::string(x.type_name()); })
      .def("parameters", &nn::Module::parameters)
      .def("named_parameters", &nn::Module::named_parameters)
      .def("state_dict", [](const nn::Module& x) { return to_dict(x.state_dict()); })
      .def(
          "load_state_dict",
          [](nn::Module& x, const nb::dict& state, bool strict) {
            x.load_state_dict(from_dict(state), strict);
          },
          nb::arg("state"), nb::arg("strict") = true)
      .def("train", &nn::Module::train, nb::arg("mode") = true)
      .def("eval", &nn::Module::eval)
      .def_prop_ro("training", &nn::Module::training)
      .def(
          "to",
          [](nn::Module& x, nb::handle dtype) -> nn::Module& {
            x.to(dtype_arg(dtype));
            return x;
          },
          nb::arg("dtype"), nb::rv_policy::reference,
          "Converts parameters and buffers to dtype (norm layers stay f32), in place.")
      .def("__repr__", [](const nn::Module& x) {
        return std::string(x.type_name()) + "(" + std::to_string(x.parameters().size()) +
               " parameters)";
      });

  nb::class_<nn::Layer, nn::Module>(m, "Layer", "A module with forward(x).")
      .def("forward", &nn::Layer::forward, nb::arg("x"), Release())
      .def("__call__", &nn::Layer::forward, nb::arg("x"), Release());

  nb::class_<nn::Linear, nn::Layer>(m, "Linear")
      .def(nb::init<int64_t, int64_t, bool>(), nb::arg("in_features"), nb::arg("out_features"),
           nb::arg("bias") = true)
      .def_prop_ro("weight", &nn::Linear::weight)
      .def_prop_ro("bias", [](const nn::Linear& x) -> nb::object {
        const Tensor b = x.bias();
        return b.defined() ? nb::cast(b) : nb::none();
      });
  nb::class_<nn::ReLU, nn::Layer>(m, "ReLU").def(nb::init<>());
  nb::class_<nn::SiLU, nn::Layer>(m, "SiLU").def(nb::init<>());
  nb::class_<nn::GELU, nn::Layer>(m, "GELU").def(
      "__init__",
      [](nn::GELU* self, const std::string& approximate) {
        MIXPREC_CHECK(approximate == "none" || approximate == "tanh",
                      "[GELU] approximate must be 'none' or 'tanh', got '", approximate, "'");
        new (self) nn::GELU(approximate == "tanh");
      },
      nb::arg("approximate") = "none");
  nb::class_<nn::Conv2d, nn::Layer>(m, "Conv2d")
      .def(
          "__init__",
          [](nn::Conv2d* self, int64_t in, int64_t out, int64_t kernel, int64_t stride,
             int64_t padding, int64_t dilation, int64_t groups, bool bias) {
            new (self) nn::Conv2d(in, out, kernel, {stride, padding, dilation, groups}, bias);
          },
          nb::arg("in_channels"), nb::arg("out_channels"), nb::arg("kernel_size"),
          nb::arg("stride") = 1, nb::arg("padding") = 0, nb::arg("dilation") = 1,
          nb::arg("groups") = 1, nb::arg("bias") = true)
      .def_prop_ro("weight", &nn::Conv2d::weight)
      .def_prop_ro("bias", [](const nn::Conv2d& x) -> nb::object {
        const Tensor b = x.bias();
        return b.defined() ? nb::cast(b) : nb::none();
      });
  nb::class_<nn::LayerNorm, nn::Layer>(m, "LayerNorm")
      .def(nb::init<Shape, double, bool>(), nb::arg("normalized_shape"), nb::arg("eps") = 1e-5,
           nb::arg("elementwise_affine") = true);
  nb::class_<nn::RMSNorm, nn::Layer>(m, "RMSNorm")
      .def(nb::init<Shape, double>(), nb::arg("normalized_shape"), nb::arg("eps") = 1e-6);
  nb::class_<nn::GroupNorm, nn::Layer>(m, "GroupNorm")
      .def(
          "__init__",
          [](nn::GroupNorm* self, int64_t groups, int64_t channels, double eps) {
            new (self) nn::GroupNorm(groups, channels, eps);
          },
          nb::arg("num_groups"), nb::arg("num_channels"), nb::arg("eps") = 1e-5);
  nb::class_<nn::Embedding, nn::Layer>(m, "Embedding")
      .def(
          "__init__",
          [](nn::Embedding* self, int64_t num, int64_t dim) { new (self) nn::Embedding(num, dim); },
          nb::arg("num_embeddings"), nb::arg("embedding_dim"))
      .def_prop_ro("weight", &nn::Embedding::weight);
  nb::class_<nn::Dropout, nn::Layer>(m, "Dropout")
      .def(
          "__init__", [](nn::Dropout* self, double p) { new (self) nn::Dropout(p); },
          nb::arg("p") = 0.5);
  nb::class_<nn::Sequential, nn::Layer>(m, "Sequential")
      .def(
          "__init__",
          [](nn::Sequential* self, nb::args layers) {
            std::vector<std::shared_ptr<nn::Layer>> list;
            for (nb::handle layer : layers)
              list.push_back(nb::cast<std::shared_ptr<nn::Layer>>(layer));
            new (self) nn::Sequential(std::move(list));
          },
          "Sequential(layer, layer, ...), as torch.nn.Sequential.")
      .def("append", &nn::Sequential::push_back, nb::arg("layer"));
  nb::class_<nn::MultiheadAttention, nn::Module>(m, "MultiheadAttention")
      .def(
          "__init__",
          [](nn::MultiheadAttention* self, int64_t embed_dim, int64_t heads) {
            new (self) nn::MultiheadAttention(embed_dim, heads);
          },
          nb::arg("embed_dim"), nb::arg("num_heads"))
      .def(
          "__call__",
          [](nn::MultiheadAttention& x, const Tensor& query, nb::handle key, nb::handle value,
             bool causal) {
            const Tensor k = key.is_none() ? query : nb::cast<Tensor>(key);
            const Tensor v = value.is_none() ? k : nb::cast<Tensor>(value);
            nb::gil_scoped_release release;
            return x.forward(query, k, v, causal);
          },
          nb::arg("query"), nb::arg("key") = nb::none(), nb::arg("value") = nb::none(),
          nb::arg("causal") = false, "Self-attention when key and value are None ([B, S, E]).");

  m.def(
      "save_module",
      [](const nn::Module& module, const std::string& path) { io::save_module(module, path); },
      nb::arg("module"), nb::arg("path"), Release(),
      "The state dict to a safetensors file, written atomically.");
  m.def("load_module", &io::load_module, nb::arg("module"), nb::arg("path"),
        nb::arg("strict") = true, Release(),
        "Loads a safetensors file into the module's own tensors (dtypes converted, RNE).");
}

}  // namespace mixprec::python
