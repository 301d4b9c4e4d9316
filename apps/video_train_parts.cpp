#include "video_train_parts.h"

#include <filesystem>

#include "cli_args.h"
#include "mixprec/core/error.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/nn/precision.h"
#include "mixprec/ops/functional.h"
#include "run_guard.h"

namespace mixprec::app {

Tensor with_own_prediction(models::UNetVideo& model, const models::NoiseSchedule& schedule,
                           const std::vector<Tensor>& window, int64_t own, int64_t steps,
                           models::Prediction prediction, bool residual, DType input_dtype,
                           Generator& gen, const Tensor& true_context) {
  const auto k = static_cast<std::ptrdiff_t>(model.config().context_frames);
  auto first = [&](const Tensor& frames) { return frames.narrow(0, 0, own); };
  std::vector<Tensor> earlier;
  for (std::ptrdiff_t i = 0; i < k; ++i)
    earlier.push_back(models::quantize_8bit(first(window[static_cast<std::size_t>(i)])));
  const Tensor& target = window[static_cast<std::size_t>(k)];
  const Tensor noise = Tensor::randn({own, target.size(1), target.size(2), target.size(3)}, gen);
  const Tensor last = residual ? earlier.back() : Tensor();
  const Tensor predicted = models::quantize_8bit(
      models::sample_next_frames(model, schedule, models::context_of(earlier), {}, noise, steps,
                                 prediction, input_dtype, last));
  std::vector<Tensor> own_frames(earlier.begin() + 1, earlier.end());
  own_frames.push_back(predicted.to(target.dtype()));
  const int64_t batch = true_context.size(0);
  if (own == batch) return models::context_of(own_frames);
  return cat({models::context_of(own_frames), true_context.narrow(0, own, batch - own)}, 0)
      .contiguous(MemoryFormat::ChannelsLast);
}

std::vector<Tensor> parameters_in(nn::Module& module, const amp::PrecisionConfig& pc) {
  nn::to_precision(module, pc);
  return module.parameters();
}

double train_critic(Adversary& a, const Tensor& real, const Tensor& fake) {
  a.opt.zero_grad();
  const Tensor loss = models::critic_hinge_loss(a.critic, real, fake);
  a.scaler.scale(loss).backward();
  a.scaler.unscale(a.opt);
  a.scaler.step(a.opt);
  a.scaler.update();
  a.opt.zero_grad();
  return loss.item<double>();
}

void load_critic(const std::string& path, int64_t step, Adversary& a) {
  if (!std::filesystem::exists(path))
    throw UsageError{"video train: --resume of an adversarial run needs " + path};
  const io::SafetensorsMetadata meta = io::load_checkpoint(path, a.critic, a.opt, &a.scaler);
  const auto saved = meta.find("step");
  if (saved == meta.end() || saved->second != std::to_string(step))
    throw Error("video train: " + path + " is from step " +
                (saved == meta.end() ? std::string("?") : saved->second) +
                ", the checkpoint from step " + std::to_string(step) +
                " (a crash between the two writes): resume needs both from one step");
}

void save_average(const std::string& path, int64_t step, const nn::Module& model,
                  const optim::WeightAverage& average) {
  io::NamedTensors tensors;
  const io::NamedTensors params = model.named_parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    tensors.emplace_back(params[i].first, average.averages()[i]);
  io::save_safetensors(path, tensors,
                       {{"step", std::to_string(step)}, {"ema", exact_text(average.decay())}});
}

void load_average(const std::string& path, int64_t step, const nn::Module& model,
                  optim::WeightAverage& average) {
  if (!std::filesystem::exists(path))
    throw UsageError{"video train: --resume of a run with --ema needs " + path};
  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const auto saved = file.metadata().find("step");
  if (saved == file.metadata().end() || saved->second != std::to_string(step))
    throw Error("video train: " + path + " is from step " +
                (saved == file.metadata().end() ? std::string("?") : saved->second) +
                ", the checkpoint from step " + std::to_string(step) +
                " (a crash between the two writes): resume needs both from one step");
  const io::NamedTensors params = model.named_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor value = file.tensor(params[i].first);
    Tensor& a = average.averages()[i];
    if (value.shape() != a.shape() || value.dtype() != a.dtype())
      throw Error("video train: " + path + ": '" + params[i].first + "' does not match the model");
    a.copy_(value);
  }
}

}  // namespace mixprec::app
