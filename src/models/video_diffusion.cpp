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

Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& prev,
                            const Tensor& current, const VideoLossOptions& options,
                            DType input_dtype, Generator& gen) {
  MIXPREC_CHECK(prev.dim() == 4 && prev.shape() == current.shape(),
                "[video_diffusion_loss] expected prev and current [B, 3, H, W] of one shape, got ",
                shape_to_string(prev.shape()), " and ", shape_to_string(current.shape()));
  MIXPREC_CHECK(options.context_noise_max >= 0, "[video_diffusion_loss] negative context noise");
  const int64_t batch = prev.size(0);
  Tensor x_t, target, context, timesteps;
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
    context = prev.to(DType::F32);
    if (options.context_noise_max > 0) {
      // sigma per sample ~ U(0, max): the model sees contexts from clean to visibly degraded.
      const Tensor sigma = mul(Tensor::rand({batch, 1, 1, 1}, gen), options.context_noise_max);
      context = add(context, mul(Tensor::randn(context.shape(), gen), sigma));
    }
  }
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const Tensor out = model.forward(x_t.to(input_dtype).contiguous(cl),
                                   context.to(input_dtype).contiguous(cl), timesteps);
  return mse_loss(out.to(DType::F32), target.contiguous(cl));
}

VideoStream::VideoStream(UNetVideo& model, NoiseSchedule schedule, const Tensor& first_frame,
                         StreamOptions options)
    : model_(model),
      schedule_(std::move(schedule)),
      options_(options),
      model_dtype_(parameter_dtype(model)) {
  MIXPREC_CHECK(first_frame.dim() == 4 && first_frame.size(0) == 1,
                "[VideoStream] expected a first frame [1, 3, H, W], got ",
                shape_to_string(first_frame.shape()));
  context_ = first_frame.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
}

Tensor VideoStream::next() {
  InferenceMode inference;
  Generator gen;
  // Frame i's own noise: 2^32 words per frame, far more than a frame draws.
  gen.set_state({options_.seed, static_cast<uint64_t>(index_) << 32});
  const Tensor noise = Tensor::randn(context_.shape(), gen);
  const Denoiser denoise = [&](const Tensor& x_t, const Tensor& t) {
    return model_.forward(x_t.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast), context_, t);
  };
  const Tensor frame = ddim_sample(denoise, noise, schedule_, options_.steps, options_.prediction);
  context_ = frame.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  ++index_;
  return frame;
}

}  // namespace mixprec::models
