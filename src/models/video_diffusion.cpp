#include "mixprec/models/video_diffusion.h"

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"

namespace mixprec::models {

DType parameter_dtype(const UNetVideo& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (name.find("norm") == std::string::npos && is_floating(p.dtype())) return p.dtype();
  return DType::F32;
}

Tensor context_of(const std::vector<Tensor>& frames) {
  MIXPREC_CHECK(!frames.empty(), "[context_of] no frames");
  std::vector<Tensor> cl;
  for (const Tensor& f : frames) cl.push_back(f.contiguous(MemoryFormat::ChannelsLast));
  return cl.size() == 1 ? cl[0] : cat(cl, 1).contiguous(MemoryFormat::ChannelsLast);
}

Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule,
                            const Tensor& context, const Tensor& current,
                            const VideoLossOptions& options, DType input_dtype, Generator& gen) {
  MIXPREC_CHECK(current.dim() == 4 && context.dim() == 4 && context.size(0) == current.size(0),
                "[video_diffusion_loss] expected context [B, 3K, H, W] and current [B, 3, H, W], "
                "got ",
                shape_to_string(context.shape()), " and ", shape_to_string(current.shape()));
  MIXPREC_CHECK(options.context_noise_max >= 0, "[video_diffusion_loss] negative context noise");
  const int64_t batch = current.size(0);
  Tensor x_t, target, noisy_context, timesteps, sigma;
  {
    NoGrad no_grad;
    timesteps = Tensor::empty({batch}, DType::I64);
    const Tensor u = Tensor::rand({batch}, gen, DType::F64);
    for (int64_t i = 0; i < batch; ++i)
      timesteps.data<int64_t>()[i] = std::min<int64_t>(
          schedule.steps() - 1,
          static_cast<int64_t>(u.data<double>()[i] * static_cast<double>(schedule.steps())));
    const Tensor x0 = current.to(DType::F32);
    const Tensor noise = Tensor::randn(x0.shape(), gen);
    x_t = schedule.add_noise(x0, noise, timesteps);
    target = schedule.target(x0, noise, timesteps, options.prediction);
    noisy_context = context.to(DType::F32);
    sigma = Tensor::zeros({batch});
    if (options.context_noise_max > 0) {
      // sigma per sample ~ U(0, max), the same for all its context frames: the model sees
      // contexts from clean to visibly degraded.
      sigma = mul(Tensor::rand({batch}, gen), options.context_noise_max);
      noisy_context = add(noisy_context, mul(Tensor::randn(noisy_context.shape(), gen),
                                             sigma.reshape({batch, 1, 1, 1})));
    }
  }
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const Tensor out = model.forward(x_t.to(input_dtype).contiguous(cl),
                                   noisy_context.to(input_dtype).contiguous(cl), timesteps, sigma);
  return mse_loss(out.to(DType::F32), target.contiguous(cl));
}

VideoStream::VideoStream(UNetVideo& model, NoiseSchedule schedule, const Tensor& first_frames,
                         StreamOptions options)
    : model_(model),
      schedule_(std::move(schedule)),
      options_(options),
      model_dtype_(parameter_dtype(model)) {
  const int64_t k = model.config().context_frames;
  MIXPREC_CHECK(first_frames.dim() == 4 && first_frames.size(0) == k,
                "[VideoStream] expected the first frames [", k,
                ", 3, H, W] (the model's context frames), got ",
                shape_to_string(first_frames.shape()));
  MIXPREC_CHECK(options.context_noise >= 0, "[VideoStream] negative context noise");
  // [K, 3, H, W] -> [1, 3K, H, W]: frame-major channels, oldest first, as context_of makes.
  context_ = first_frames.contiguous()
                 .reshape({1, k * first_frames.size(1), first_frames.size(2), first_frames.size(3)})
                 .to(model_dtype_)
                 .contiguous(MemoryFormat::ChannelsLast);
}

Tensor VideoStream::next() {
  InferenceMode inference;
  Generator gen;
  // Frame i's own noise: 2^32 words per frame, far more than a frame draws.
  gen.set_state({options_.seed, static_cast<uint64_t>(index_) << 32});
  const Tensor noise = Tensor::randn(
      {1, model_.config().frame_channels, context_.size(2), context_.size(3)}, gen);
  Tensor context = context_;
  Tensor sigma;
  if (options_.context_noise > 0) {
    context = add(context.to(DType::F32),
                  mul(Tensor::randn(context.shape(), gen), options_.context_noise))
                  .to(model_dtype_)
                  .contiguous(MemoryFormat::ChannelsLast);
    sigma = Tensor::full({1}, options_.context_noise);
  }
  const Denoiser denoise = [&](const Tensor& x_t, const Tensor& t) {
    return model_.forward(x_t.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast), context, t,
                          sigma);
  };
  const Tensor frame = ddim_sample(denoise, noise, schedule_, options_.steps, options_.prediction);
  const Tensor next_frame = frame.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  const int64_t c = frame.size(1);
  context_ = context_.size(1) == c
                 ? next_frame
                 : context_of({context_.narrow(1, c, context_.size(1) - c), next_frame});
  ++index_;
  return frame;
}

}  // namespace mixprec::models
