#include "mixprec/models/video_diffusion.h"

#include <algorithm>
#include <cmath>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/io/image.h"
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

Tensor quantize_8bit(const Tensor& frames) {
  Tensor out = frames.to(DType::F32).contiguous().clone();
  float* v = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i)
    v[i] = static_cast<float>(io::float_to_byte(v[i])) / 127.5f - 1.0f;
  return out;
}

namespace {

// Normalised Gaussian taps for std sigma > 0, radius ceil(3 sigma).
std::vector<float> gaussian_taps(double sigma) {
  const auto radius = static_cast<int64_t>(std::ceil(3 * sigma));
  std::vector<float> taps(static_cast<std::size_t>(2 * radius + 1));
  double total = 0;
  for (int64_t i = -radius; i <= radius; ++i)
    total += taps[static_cast<std::size_t>(i + radius)] =
        static_cast<float>(std::exp(-0.5 * static_cast<double>(i * i) / (sigma * sigma)));
  for (float& t : taps) t = static_cast<float>(t / total);
  return taps;
}

// One plane [H, W] blurred along rows then columns, edges replicated.
void blur_plane(float* plane, int64_t h, int64_t w, const std::vector<float>& taps,
                std::vector<float>& scratch) {
  const auto radius = static_cast<int64_t>(taps.size() / 2);
  scratch.resize(static_cast<std::size_t>(h * w));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      float acc = 0;
      for (int64_t k = -radius; k <= radius; ++k)
        acc += taps[static_cast<std::size_t>(k + radius)] *
               plane[y * w + std::clamp<int64_t>(x + k, 0, w - 1)];
      scratch[static_cast<std::size_t>(y * w + x)] = acc;
    }
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      float acc = 0;
      for (int64_t k = -radius; k <= radius; ++k)
        acc += taps[static_cast<std::size_t>(k + radius)] *
               scratch[static_cast<std::size_t>(std::clamp<int64_t>(y + k, 0, h - 1) * w + x)];
      plane[y * w + x] = acc;
    }
}

}  // namespace

Tensor blur_frames(const Tensor& frames, const std::vector<double>& sigma) {
  MIXPREC_CHECK(frames.dim() == 4 && static_cast<int64_t>(sigma.size()) == frames.size(0),
                "[blur_frames] expected frames [B, C, H, W] and B sigmas, got ",
                shape_to_string(frames.shape()), " and ", sigma.size());
  Tensor out = frames.to(DType::F32).contiguous().clone();
  const int64_t c = out.size(1), h = out.size(2), w = out.size(3);
  std::vector<float> scratch;
  for (int64_t b = 0; b < out.size(0); ++b) {
    const double s = sigma[static_cast<std::size_t>(b)];
    MIXPREC_CHECK(s >= 0 && std::isfinite(s), "[blur_frames] invalid sigma ", s);
    if (s == 0) continue;
    const std::vector<float> taps = gaussian_taps(s);
    for (int64_t ch = 0; ch < c; ++ch)
      blur_plane(out.data<float>() + (b * c + ch) * h * w, h, w, taps, scratch);
  }
  return out.contiguous(MemoryFormat::ChannelsLast);
}

Tensor sample_next_frames(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& context,
                          const Tensor& context_sigma, const Tensor& noise, int64_t steps,
                          Prediction prediction, DType input_dtype, const Tensor& last) {
  NoGrad no_grad;
  const Tensor ctx = context.to(input_dtype).contiguous(MemoryFormat::ChannelsLast);
  const Denoiser denoise = [&](const Tensor& x_t, const Tensor& t) {
    return model.forward(x_t.to(input_dtype).contiguous(MemoryFormat::ChannelsLast), ctx, t,
                         context_sigma);
  };
  const Tensor sampled = ddim_sample(denoise, noise, schedule, steps, prediction);
  if (!last.defined()) return sampled;
  return clamp(add(last.to(DType::F32), mul(sampled, 2.0)), -1.0, 1.0);
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
    Tensor x0 = current.to(DType::F32);
    const Tensor noise = Tensor::randn(x0.shape(), gen);
    noisy_context = options.quantize_context ? quantize_8bit(context) : context.to(DType::F32);
    if (options.context_blur_max > 0) {
      const Tensor u_blur = Tensor::rand({batch}, gen, DType::F64);
      std::vector<double> blur(static_cast<std::size_t>(batch));
      for (int64_t i = 0; i < batch; ++i)
        blur[static_cast<std::size_t>(i)] = u_blur.data<double>()[i] * options.context_blur_max;
      noisy_context = blur_frames(noisy_context, blur);
    }
    sigma = Tensor::zeros({batch});
    if (options.context_noise_max > 0) {
      // sigma per sample ~ U(0, max), the same for all its context frames: the model sees
      // contexts from clean to visibly degraded.
      sigma = mul(Tensor::rand({batch}, gen), options.context_noise_max);
      noisy_context = add(noisy_context, mul(Tensor::randn(noisy_context.shape(), gen),
                                             sigma.reshape({batch, 1, 1, 1})));
    }
    if (options.residual) {
      // Relative to the newest context frame as the network sees it, noise included: the
      // change to learn then also removes that noise, so a stream conditioned on a little noise
      // cleans up its own grain instead of accumulating it.
      const int64_t c = current.size(1);
      x0 = mul(sub(x0, noisy_context.narrow(1, noisy_context.size(1) - c, c)), 0.5);
    }
    x_t = schedule.add_noise(x0, noise, timesteps);
    target = schedule.target(x0, noise, timesteps, options.prediction);
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
  const int64_t c = noise.size(1);
  const Tensor last = options_.residual ? context.narrow(1, context.size(1) - c, c) : Tensor();
  Tensor frame = sample_next_frames(model_, schedule_, context, sigma, noise, options_.steps,
                                    options_.prediction, model_dtype_, last);
  if (options_.quantize) frame = quantize_8bit(frame);
  const Tensor next_frame = frame.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  context_ = context_.size(1) == c
                 ? next_frame
                 : context_of({context_.narrow(1, c, context_.size(1) - c), next_frame});
  ++index_;
  return frame;
}

}  // namespace mixprec::models
