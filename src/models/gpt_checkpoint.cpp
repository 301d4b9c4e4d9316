#include "mixprec/models/gpt_checkpoint.h"

#include <charconv>
#include <set>
#include <string_view>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::models {
namespace {

constexpr std::string_view kModelPrefix = "model.";  // io/checkpoint.h's names

const io::TensorInfo& model_tensor(const io::SafetensorsFile& file, const std::string& name,
                                   const std::string& path, int64_t dims) {
  const std::string key = std::string(kModelPrefix) + name;
  MIXPREC_CHECK(file.contains(key), "[load_gpt] ", path, ": no tensor '", key,
                "': not a GPT training checkpoint");
  const io::TensorInfo& info = file.info(key);
  MIXPREC_CHECK(static_cast<int64_t>(info.shape.size()) == dims && info.dtype.has_value(),
                "[load_gpt] ", path, ": '", key, "' has shape ", shape_to_string(info.shape),
                " (", info.dtype_name, "), expected ", dims, " dims");
  return info;
}

int64_t heads_of(const io::SafetensorsFile& file, const std::string& path) {
  const auto it = file.metadata().find(kGPTHeadsKey);
  MIXPREC_CHECK(it != file.metadata().end(), "[load_gpt] ", path, ": the metadata has no '",
                kGPTHeadsKey, "' (a checkpoint from before it was recorded): pass the head count");
  int64_t heads = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), heads);
  MIXPREC_CHECK(ec == std::errc() && end == text.data() + text.size() && heads > 0,
                "[load_gpt] ", path, ": metadata '", kGPTHeadsKey, "' is '", text,
                "', expected a positive integer");
  return heads;
}

}  // namespace

std::unique_ptr<GPT> load_gpt(const std::string& checkpoint, int64_t heads) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(checkpoint);
  const io::TensorInfo& wte = model_tensor(file, "wte.weight", checkpoint, 2);
  const io::TensorInfo& wpe = model_tensor(file, "wpe.weight", checkpoint, 2);
  std::set<int64_t> blocks;  // "model.h.<i>.<...>"
  nn::NamedTensors state;
  for (const io::TensorInfo& info : file.tensors()) {
    const std::string_view name = info.name;
    if (!name.starts_with(kModelPrefix)) continue;
    const std::string_view local = name.substr(kModelPrefix.size());
    if (local.starts_with("h.")) {
      int64_t i = 0;
      std::from_chars(local.data() + 2, local.data() + local.size(), i);
      blocks.insert(i);
    }
    state.emplace_back(std::string(local), file.tensor(info));
  }
  const GPTConfig config{.vocab = wte.shape[0],
                         .context = wpe.shape[0],
                         .layers = static_cast<int64_t>(blocks.size()),
                         .d_model = wte.shape[1],
                         .heads = heads > 0 ? heads : heads_of(file, checkpoint)};
  config.validate();
  Generator unused(0);  // every weight is replaced by the file's
  auto model = std::make_unique<GPT>(config, unused);
  // 16-bit parameters stay 16-bit: load_state_dict would otherwise round them into f32 copies
  // that are the same values but not the trainer's model (norms stay f32 either way).
  if (*wte.dtype != DType::F32) model->to(*wte.dtype);
  model->load_state_dict(state, /*strict=*/true);
  return model;
}

std::unique_ptr<GPT> load_gpt_f32(const std::string& checkpoint) {
  std::unique_ptr<GPT> model = load_gpt(checkpoint);
  const std::vector<Tensor> sixteen_bit = model->parameters();
  model->to(DType::F32);
  const io::SafetensorsFile file = io::SafetensorsFile::open(checkpoint);
  const std::vector<Tensor> params = model->parameters();
  NoGrad no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (sixteen_bit[i].dtype() == DType::F32) continue;
    const std::string name = "optim." + std::to_string(i) + ".master";  // io/checkpoint.h's
    if (!file.contains(name)) continue;
    const Tensor master = file.tensor(name);
    MIXPREC_CHECK(master.shape() == params[i].shape() && master.dtype() == DType::F32,
                  "[load_gpt] ", checkpoint, ": ", name, " is not parameter ", i,
                  "'s f32 master weight");
    params[i].copy_(master);
  }
  return model;
}

}  // namespace mixprec::models
