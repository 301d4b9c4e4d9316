// mixprec.gpt: the GPT application (models/gpt*.h) from Python: the model, a training
// checkpoint's model, the trainer of `mixprec train gpt` (same options, same steps, the same
// bits), byte-level text and sampling. python/mixprec/gpt.py presents it.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/models/byte_tokenizer.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/gpt_checkpoint.h"
#include "mixprec/models/gpt_generate.h"
#include "mixprec/models/gpt_train.h"
#include "mixprec/models/text_dataset.h"
#include "mixprec/nn/clip.h"

namespace mixprec::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;
using models::GPT;
using models::GPTConfig;
using models::GPTTrainer;
using models::TextDataset;

models::Split split_arg(const std::string& name) {
  if (name == "train") return models::Split::Train;
  if (name == "validation" || name == "val") return models::Split::Validation;
  throw Error("[TextDataset] split must be 'train' or 'validation', got '" + name + "'");
}

// The trainer with the objects it works on kept alive by the Python side (keep_alive) and
// the settings a checkpoint records so that load_gpt can rebuild the model.
class Trainer {
 public:
  Trainer(GPT& model, const TextDataset& data, models::GPTTrainOptions options)
      : model_(model), trainer_(model, data, options) {}

  double step(int64_t index) { return trainer_.step(index); }
  double evaluate(int64_t batches, uint64_t seed) { return trainer_.evaluate(batches, seed); }
  double learning_rate(int64_t index) const { return trainer_.learning_rate(index); }
  GPTTrainer& get() { return trainer_; }

  void save(const std::string& path) {
    io::SafetensorsMetadata meta{{"precision", trainer_.precision().name()},
                                 {models::kGPTHeadsKey, std::to_string(model_.config().heads)}};
    if (!trainer_.fallback_reason().empty()) meta["fallback_reason"] = trainer_.fallback_reason();
    io::save_checkpoint(path, model_, trainer_.optimizer(), &trainer_.scaler(), meta);
  }
  void load(const std::string& path) {
    io::load_checkpoint(path, model_, trainer_.optimizer(), &trainer_.scaler());
  }

 private:
  GPT& model_;
  GPTTrainer trainer_;
};

}  // namespace

void bind_gpt(nb::module_& m) {
  nb::class_<GPTConfig>(m, "GPTConfig", "Sizes of a GPT (models/gpt.h).")
      .def(
          "__init__",
          [](GPTConfig* self, int64_t vocab, int64_t context, int64_t layers, int64_t d_model,
             int64_t heads, double dropout) {
            new (self) GPTConfig{.vocab = vocab,
                                 .context = context,
                                 .layers = layers,
                                 .d_model = d_model,
                                 .heads = heads,
                                 .dropout = dropout};
            self->validate();
          },
          nb::arg("vocab") = 256, nb::arg("context") = 256, nb::arg("layers") = 6,
          nb::arg("d_model") = 384, nb::arg("heads") = 6, nb::arg("dropout") = 0.0)
      .def_static("tiny", &GPTConfig::tiny, "2 layers, d_model 32, 4 heads, context 32.")
      .def_static("small", &GPTConfig::small, "6 layers, d_model 384, 6 heads, context 256.")
      .def_ro("vocab", &GPTConfig::vocab)
      .def_ro("context", &GPTConfig::context)
      .def_ro("layers", &GPTConfig::layers)
      .def_ro("d_model", &GPTConfig::d_model)
      .def_ro("heads", &GPTConfig::heads)
      .def_ro("dropout", &GPTConfig::dropout)
      .def("__repr__", [](const GPTConfig& c) {
        return "GPTConfig(vocab=" + std::to_string(c.vocab) +
               ", context=" + std::to_string(c.context) + ", layers=" + std::to_string(c.layers) +
               ", d_model=" + std::to_string(c.d_model) + ", heads=" + std::to_string(c.heads) +
               ", dropout=" + std::to_string(c.dropout) + ")";
      });

  nb::class_<GPT, nn::Layer>(m, "GPT",
                             "A GPT-2 style decoder (models/gpt.h): GPT(config, seed) draws "
                             "the weights `mixprec train gpt --seed` starts from.")
      .def(
          "__init__",
          [](GPT* self, const GPTConfig& config, uint64_t seed) {
            Generator gen(seed);
            new (self) GPT(config, gen);
          },
          nb::arg("config"), nb::arg("seed") = 0)
      .def("loss", &GPT::loss, nb::arg("tokens"), nb::arg("targets"), Release(),
           "Mean cross entropy of forward(tokens) against targets [B, T]: a [] f32 tensor.")
      .def_prop_ro("config", &GPT::config)
      .def("num_parameters", &GPT::num_parameters)
      .def("summary", &GPT::summary)
      .def_prop_rw("activation_checkpointing", &GPT::activation_checkpointing,
                   &GPT::set_activation_checkpointing);

  m.def("load_gpt", &models::load_gpt, nb::arg("checkpoint"), nb::arg("heads") = 0, Release(),
        "The model of a training checkpoint (mixprec train gpt, Trainer.save), in its dtypes.");

  nb::class_<TextDataset>(m, "TextDataset", "Bytes of a text, split train / validation.")
      .def(
          "__init__",
          [](TextDataset* self, std::vector<int64_t> tokens, double validation_fraction) {
            new (self) TextDataset(std::move(tokens), validation_fraction);
          },
          nb::arg("tokens"), nb::arg("validation_fraction") = 0.1)
      .def_static("from_file", &TextDataset::from_file, nb::arg("path"),
                  nb::arg("validation_fraction") = 0.1, Release())
      .def(
          "size", [](const TextDataset& d, const std::string& split) {
            return d.size(split_arg(split));
          },
          nb::arg("split") = "train")
      .def(
          "batch",
          [](const TextDataset& d, int64_t index, int64_t batch, int64_t context, uint64_t seed,
             const std::string& split) {
            const models::TokenBatch b = d.batch_at(split_arg(split), batch, context, seed, index);
            return std::make_pair(b.inputs, b.targets);
          },
          nb::arg("index"), nb::arg("batch"), nb::arg("context"), nb::arg("seed") = 0,
          nb::arg("split") = "train",
          "(inputs, targets) [B, T] i64 of batch `index` of the seeded stream (the trainer's).");

  using Settings = models::GPTTrainSettings;
  nb::class_<Settings>(m, "GPTTrainSettings",
                       "The trainer's settings with `mixprec train gpt`'s defaults "
                       "(models/gpt_train.h); mixprec.gpt.Trainer takes them as keywords.")
      .def(nb::init<>())
      .def_rw("precision", &Settings::precision)
      .def_rw("batch", &Settings::batch)
      .def_rw("lr", &Settings::lr)
      .def_rw("warmup", &Settings::warmup)
      .def_rw("steps", &Settings::steps)
      .def_rw("weight_decay", &Settings::weight_decay)
      .def_rw("clip", &Settings::clip)
      .def_rw("seed", &Settings::seed)
      .def_rw("grad_accum", &Settings::grad_accum)
      .def_rw("checkpoint_activations", &Settings::checkpoint_activations)
      .def_rw("rounding", &Settings::rounding)
      .def_rw("loss_scale", &Settings::loss_scale)
      .def_rw("fallback_after", &Settings::fallback_after)
      .def_rw("graph", &Settings::graph);

  nb::class_<Trainer>(m, "_GPTTrainer")
      .def(
          "__init__",
          [](Trainer* self, GPT& model, const TextDataset& data, const Settings& settings) {
            const models::GPTTrainOptions options = settings.options();
            nb::gil_scoped_release release;
            new (self) Trainer(model, data, options);
          },
          nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(), nb::arg("model"), nb::arg("data"),
          nb::arg("settings"))
      .def("step", &Trainer::step, nb::arg("index"), Release())
      .def("evaluate", &Trainer::evaluate, nb::arg("batches"), nb::arg("seed") = 1, Release())
      .def("learning_rate", &Trainer::learning_rate, nb::arg("index"))
      .def_prop_ro("precision", [](Trainer& t) { return t.get().precision().name(); })
      .def_prop_ro("last_step_skipped", [](Trainer& t) { return t.get().last_step_skipped(); })
      .def_prop_ro("fallback_reason", [](Trainer& t) { return t.get().fallback_reason(); })
      .def_prop_ro(
          "optimizer", [](Trainer& t) -> optim::Optimizer& { return t.get().optimizer(); },
          nb::rv_policy::reference_internal)
      .def_prop_ro(
          "scaler", [](Trainer& t) -> amp::GradScaler& { return t.get().scaler(); },
          nb::rv_policy::reference_internal)
      .def("save", &Trainer::save, nb::arg("path"), Release())
      .def("load", &Trainer::load, nb::arg("path"), Release());

  m.def(
      "_generate",
      [](GPT& model, const Tensor& prompt, int64_t max_new_tokens, double temperature,
         int64_t top_k, uint64_t seed, const std::string& decoding) {
        static const std::map<std::string, models::Decoding> kDecodings{
            {"replayed", models::Decoding::Replayed},
            {"cached", models::Decoding::Cached},
            {"window", models::Decoding::Window}};
        const auto it = kDecodings.find(decoding);
        MIXPREC_CHECK(it != kDecodings.end(), "[generate] decoding must be 'replayed', 'cached' "
                      "or 'window', got '", decoding, "'");
        Generator gen(seed);
        return models::generate(model, prompt, max_new_tokens, temperature, top_k, gen,
                                it->second);
      },
      nb::arg("model"), nb::arg("prompt"), nb::arg("max_new_tokens"), nb::arg("temperature"),
      nb::arg("top_k"), nb::arg("seed"), nb::arg("decoding"), Release());

  m.def(
      "clip_grad_norm_",
      [](const std::vector<Tensor>& params, double max_norm, double norm_type) {
        nb::gil_scoped_release release;
        return nn::clip_grad_norm(params, max_norm, norm_type);
      },
      nb::arg("parameters"), nb::arg("max_norm"), nb::arg("norm_type") = 2.0,
      "Scales the gradients so that their total norm is at most max_norm; returns the norm "
      "before (torch.nn.utils.clip_grad_norm_).");
}

}  // namespace mixprec::python
