#include "mixprec/models/unet_video.h"

#include <cmath>
#include <string_view>
#include <utility>

#include "mixprec/core/capture.h"
#include "mixprec/core/error.h"
#include "mixprec/nn/checkpoint.h"
#include "mixprec/nn/init.h"
#include "mixprec/nn/precision.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"

namespace mixprec::models {

using kernels::Activation;

UNetVideoConfig UNetVideoConfig::lightweight() {
  return {.name = "lightweight",
          .base_channels = 32,
          .channel_mults = {1, 2, 2},
          .res_blocks = 1,
          .attention_levels = {},
          .head_dim = 32};
}

UNetVideoConfig UNetVideoConfig::medium() {
  return {.name = "medium",
          .base_channels = 64,
          .channel_mults = {1, 2, 4},
          .res_blocks = 2,
          .attention_levels = {2},  // 16x16 at 64x64 frames
          .head_dim = 64};
}

UNetVideoConfig UNetVideoConfig::heavy() {
  UNetVideoConfig c = medium();
  c.name = "heavy";
  c.base_channels = 128;
  return c;
}

UNetVideoConfig UNetVideoConfig::xl() {
  return {.name = "xl",
          .base_channels = 208,
          .channel_mults = {1, 2, 4, 8},
          .res_blocks = 3,
          .attention_levels = {2, 3},
          .head_dim = 64,
          .groups = 16};  // divides 208 and every multiple of it
}

UNetVideoConfig UNetVideoConfig::preset(const std::string& name) {
  static constexpr std::pair<std::string_view, UNetVideoConfig (*)()> kPresets[] = {
      {"lightweight", lightweight}, {"medium", medium}, {"heavy", heavy}, {"xl", xl}};
  for (const auto& [preset_name, make] : kPresets)
    if (name == preset_name) return make();
  throw Error("[UNetVideo] unknown preset '" + name + "', expected lightweight|medium|heavy|xl");
}

// ---- blocks ----

class UNetVideo::ResBlock final : public nn::Module {
 public:
  ResBlock(int64_t in, int64_t out, int64_t time_dim, int64_t groups, Generator& gen)
      : out_channels_(out) {
    norm1_ = register_module("norm1",
                             std::make_shared<nn::GroupNorm>(groups, in, 1e-5, Activation::SiLU));
    conv1_ = register_module(
        "conv1", std::make_shared<nn::Conv2d>(in, out, 3, Conv2dParams{.padding = 1}, true, gen));
    time_ = register_module("time", std::make_shared<nn::Linear>(time_dim, out, true, gen));
    norm2_ = register_module("norm2",
                             std::make_shared<nn::GroupNorm>(groups, out, 1e-5, Activation::SiLU));
    conv2_ = register_module(
        "conv2", std::make_shared<nn::Conv2d>(out, out, 3, Conv2dParams{.padding = 1}, true, gen));
    // The residual branch starts near zero so a deep stack begins close to the identity
    // (DDPM zero-initialises it; a small scale keeps gradients flowing into conv1 too).
    nn::init::uniform_(conv2_->weight(), -1e-3, 1e-3, gen);
    if (in != out)
      skip_ = register_module("skip",
                              std::make_shared<nn::Conv2d>(in, out, 1, Conv2dParams{}, true, gen));
  }
  std::string_view type_name() const override { return "ResBlock"; }

  // x [B, in, H, W]; time [B, time_dim] already through SiLU.
  Tensor forward(const Tensor& x, const Tensor& time) {
    // Both additions ride on the convolutions (ops/conv.h): the time embedding (in conv1's bias
    // when the batch is one frame) and the skip connection (in conv2's epilogue).
    const Tensor h = conv1_->forward(norm1_->forward(x),
                                     time_->forward(time).view({x.size(0), out_channels_, 1, 1}));
    return conv2_->forward(norm2_->forward(h), skip_ != nullptr ? skip_->forward(x) : x);
  }

 private:
  int64_t out_channels_;
  std::shared_ptr<nn::GroupNorm> norm1_, norm2_;
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, skip_;
  std::shared_ptr<nn::Linear> time_;
};

class UNetVideo::AttentionBlock final : public nn::Module {
 public:
  AttentionBlock(int64_t channels, int64_t head_dim, int64_t groups, Generator& gen) {
    MIXPREC_CHECK(channels % head_dim == 0, "[UNetVideo] ", channels,
                  " channels do not split into heads of ", head_dim);
    norm_ = register_module("norm", std::make_shared<nn::GroupNorm>(groups, channels));
    attention_ = register_module(
        "attention", std::make_shared<nn::MultiheadAttention>(channels, channels / head_dim, gen));
  }
  std::string_view type_name() const override { return "AttentionBlock"; }

  Tensor forward(const Tensor& x) {  // x [B, C, H, W]
    const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    // Pixels as tokens: [B, C, H, W] -> [B, H*W, C], a view when x is channels_last.
    const Tensor tokens = norm_->forward(x).permute({0, 2, 3, 1}).reshape({b, h * w, c});
    const Tensor mixed = attention_->forward(tokens);
    return add(x, mixed.view({b, h, w, c}).permute({0, 3, 1, 2}));
  }

 private:
  std::shared_ptr<nn::GroupNorm> norm_;
  std::shared_ptr<nn::MultiheadAttention> attention_;
};

// ---- the network ----

namespace {

bool has_attention(const UNetVideoConfig& c, int64_t level) {
  for (int64_t l : c.attention_levels)
    if (l == level) return true;
  return false;
}

void check_config(const UNetVideoConfig& c) {
  MIXPREC_CHECK(!c.channel_mults.empty() && c.res_blocks >= 1 && c.frame_channels >= 1 &&
                    c.base_channels >= 16 && c.base_channels % 16 == 0 && c.head_dim >= 1 &&
                    c.groups >= 1 && c.context_frames >= 1 && c.context_frames <= 16,
                "[UNetVideo] invalid configuration '", c.name, "'");
  for (int64_t m : c.channel_mults)
    MIXPREC_CHECK(m >= 1, "[UNetVideo] channel multipliers must be >= 1");
  for (int64_t l : c.attention_levels)
    MIXPREC_CHECK(l >= 0 && l < static_cast<int64_t>(c.channel_mults.size()),
                  "[UNetVideo] attention level ", l, " does not exist");
  MIXPREC_CHECK(!c.anchor_map || (c.motion && c.anchor_frame),
                "[UNetVideo] an anchor map needs a motion model with an anchor frame ('", c.name,
                "')");
  MIXPREC_CHECK(!c.flow_input || c.anchor_map,
                "[UNetVideo] a flow input is for anchor-map models ('", c.name, "')");
  MIXPREC_CHECK(!c.reflect || c.anchor_map,
                "[UNetVideo] reflect gates are for anchor-map models ('", c.name, "')");
}

}  // namespace

UNetVideo::UNetVideo(UNetVideoConfig config, Generator& gen) : config_(std::move(config)) {
  check_config(config_);
  const UNetVideoConfig& c = config_;
  const int64_t base = c.base_channels, time_dim = 4 * base;
  const auto levels = static_cast<int64_t>(c.channel_mults.size());
  const int64_t embedding_dim = c.context_noise_level ? 2 * base : base;
  time_fc1_ = register_module("time_fc1",
                              std::make_shared<nn::Linear>(embedding_dim, time_dim, true, gen));
  time_fc2_ =
      register_module("time_fc2", std::make_shared<nn::Linear>(time_dim, time_dim, true, gen));
  conv_in_ = register_module("conv_in",
                             std::make_shared<nn::Conv2d>(c.frame_channels + c.context_channels(), base, 3,
                                                          Conv2dParams{.padding = 1}, true, gen));
  std::vector<int64_t> skip_channels = {base};
  int64_t ch = base;
  for (int64_t l = 0; l < levels; ++l) {
    Level level;
    const int64_t out = base * c.channel_mults[static_cast<std::size_t>(l)];
    for (int64_t b = 0; b < c.res_blocks; ++b) {
      const std::string name = "down." + std::to_string(l) + "." + std::to_string(b);
      level.blocks.push_back(
          register_module(name, std::make_shared<ResBlock>(ch, out, time_dim, c.groups, gen)));
      ch = out;
      if (has_attention(c, l))
        level.attention.push_back(register_module(
            name + ".attention", std::make_shared<AttentionBlock>(ch, c.head_dim, c.groups, gen)));
      skip_channels.push_back(ch);
    }
    if (l + 1 < levels) {
      level.resample =
          register_module("down." + std::to_string(l) + ".downsample",
                          std::make_shared<nn::Conv2d>(
                              ch, ch, 3, Conv2dParams{.stride = 2, .padding = 1}, true, gen));
      skip_channels.push_back(ch);
    }
    down_.push_back(std::move(level));
  }
  mid1_ = register_module("mid.0", std::make_shared<ResBlock>(ch, ch, time_dim, c.groups, gen));
  mid_attention_ = register_module("mid.attention",
                                   std::make_shared<AttentionBlock>(ch, c.head_dim, c.groups, gen));
  mid2_ = register_module("mid.1", std::make_shared<ResBlock>(ch, ch, time_dim, c.groups, gen));
  for (int64_t l = levels - 1; l >= 0; --l) {
    Level level;
    const int64_t out = base * c.channel_mults[static_cast<std::size_t>(l)];
    for (int64_t b = 0; b <= c.res_blocks; ++b) {
      const std::string name = "up." + std::to_string(l) + "." + std::to_string(b);
      const int64_t skip = skip_channels.back();
      skip_channels.pop_back();
      level.blocks.push_back(register_module(
          name, std::make_shared<ResBlock>(ch + skip, out, time_dim, c.groups, gen)));
      ch = out;
      if (has_attention(c, l))
        level.attention.push_back(register_module(
            name + ".attention", std::make_shared<AttentionBlock>(ch, c.head_dim, c.groups, gen)));
    }
    if (l > 0)
      level.resample = register_module(
          "up." + std::to_string(l) + ".upsample",
          std::make_shared<nn::Conv2d>(ch, ch, 3, Conv2dParams{.padding = 1}, true, gen));
    up_.push_back(std::move(level));
  }
  norm_out_ = register_module(
      "norm_out", std::make_shared<nn::GroupNorm>(c.groups, ch, 1e-5, Activation::SiLU));
  conv_out_ = register_module(
      "conv_out",
      std::make_shared<nn::Conv2d>(ch, c.output_channels(), 3, Conv2dParams{.padding = 1}, true, gen));
  nn::init::uniform_(conv_out_->weight(), -1e-3, 1e-3, gen);
  to(MemoryFormat::ChannelsLast);
}

Tensor UNetVideo::forward(const Tensor& x_t, const Tensor& context, const Tensor& timesteps,
                          const Tensor& context_sigma) {
  const UNetVideoConfig& c = config_;
  const auto levels = static_cast<int64_t>(c.channel_mults.size());
  MIXPREC_CHECK(x_t.dim() == 4 && context.dim() == 4 && x_t.size(1) == c.frame_channels &&
                    context.size(0) == x_t.size(0) &&
                    context.size(1) == c.context_channels() &&
                    context.size(2) == x_t.size(2) && context.size(3) == x_t.size(3),
                "[UNetVideo] expected x_t [B, ", c.frame_channels, ", H, W] and context [B, ",
                c.context_channels(), ", H, W] (", c.context_frames, " frames",
                c.anchor_frame ? " after the anchor" : "", c.flow_input ? ", then the flow" : "",
                "), got ", shape_to_string(x_t.shape()), " and ",
                shape_to_string(context.shape()));
  const int64_t factor = int64_t{1} << (levels - 1);
  MIXPREC_CHECK(x_t.size(2) % factor == 0 && x_t.size(3) % factor == 0, "[UNetVideo] frame size ",
                x_t.size(2), "x", x_t.size(3), " must be divisible by ", factor);
  MIXPREC_CHECK(timesteps.dim() == 1 && timesteps.size(0) == x_t.size(0),
                "[UNetVideo] expected timesteps [", x_t.size(0), "], got ",
                shape_to_string(timesteps.shape()));
  MIXPREC_CHECK(!context_sigma.defined() ||
                    (context_sigma.dim() == 1 && context_sigma.size(0) == x_t.size(0)),
                "[UNetVideo] expected context_sigma [", x_t.size(0), "], got ",
                shape_to_string(context_sigma.shape()));
  const DType dtype = x_t.dtype();
  Tensor embedding = timestep_embedding(timesteps, c.base_channels, dtype);
  if (c.context_noise_level) {
    // sigma in [0, ~0.5] scaled like a timestep so the sinusoids resolve it.
    const Tensor sigma = context_sigma.defined() ? mul(context_sigma.to(DType::F32), 1000.0)
                                                 : Tensor::zeros({x_t.size(0)});
    embedding = cat({embedding, timestep_embedding(sigma, c.base_channels, dtype)}, 1);
  }
  // Each module computes in its weights' dtype (nn::as_input_of): a no-op unless a per-layer
  // precision plan stores modules in different dtypes.
  using nn::as_input_of;
  const Tensor time = silu(time_fc2_->forward(
      as_input_of(*time_fc2_, silu(time_fc1_->forward(as_input_of(*time_fc1_, embedding))))));

  const Tensor input = cat({x_t.contiguous(MemoryFormat::ChannelsLast),
                            context.to(dtype).contiguous(MemoryFormat::ChannelsLast)},
                           1);
  Tensor h = conv_in_->forward(as_input_of(*conv_in_, input));
  std::vector<Tensor> skips = {h};
  // A block (a ResBlock and its attention, if any) on x, or on cat(x, skip) in the decoder. With
  // activation checkpointing it keeps only its inputs and recomputes the rest in backward.
  auto block = [&](const Level& level, std::size_t b, const Tensor& x, const Tensor& skip) {
    const std::shared_ptr<ResBlock> res = level.blocks[b];
    const std::shared_ptr<AttentionBlock> attention =
        level.attention.empty() ? nullptr : level.attention[b];
    auto run = [res, attention](const std::vector<Tensor>& in) {
      const Tensor x = as_input_of(*res, in[0]);
      const Tensor y = res->forward(in[2].defined() ? cat({x, as_input_of(*res, in[2])}, 1) : x,
                                    as_input_of(*res, in[1]));
      return attention != nullptr ? attention->forward(as_input_of(*attention, y)) : y;
    };
    return checkpoint_blocks_ ? nn::checkpoint(run, {x, time, skip}) : run({x, time, skip});
  };
  for (Level& level : down_) {
    for (std::size_t b = 0; b < level.blocks.size(); ++b) {
      h = block(level, b, h, Tensor());
      skips.push_back(h);
    }
    if (level.resample != nullptr) {
      h = level.resample->forward(as_input_of(*level.resample, h));
      skips.push_back(h);
    }
  }
  h = mid1_->forward(as_input_of(*mid1_, h), as_input_of(*mid1_, time));
  h = mid_attention_->forward(as_input_of(*mid_attention_, h));
  h = mid2_->forward(as_input_of(*mid2_, h), as_input_of(*mid2_, time));
  for (Level& level : up_) {
    for (std::size_t b = 0; b < level.blocks.size(); ++b) {
      h = block(level, b, h, skips.back());
      skips.pop_back();
    }
    if (level.resample != nullptr)
      h = level.resample->forward(
          as_input_of(*level.resample, upsample(h, 2, kernels::UpsampleMode::Nearest)));
  }
  return conv_out_->forward(as_input_of(*conv_out_, norm_out_->forward(h)));
}

int64_t UNetVideo::parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

double UNetVideo::gflop_per_forward(int64_t height, int64_t width) const {
  const UNetVideoConfig& c = config_;
  const auto levels = static_cast<int64_t>(c.channel_mults.size());
  const int64_t base = c.base_channels, time_dim = 4 * base;
  const int64_t embedding_dim = c.context_noise_level ? 2 * base : base;
  double flop = 2.0 * (embedding_dim * time_dim + time_dim * time_dim);
  auto conv = [&](int64_t in, int64_t out, int64_t k, int64_t pixels) {
    flop += 2.0 * static_cast<double>(in * out * k * k * pixels);
  };
  auto res_block = [&](int64_t in, int64_t out, int64_t pixels) {
    conv(in, out, 3, pixels);
    conv(out, out, 3, pixels);
    if (in != out) conv(in, out, 1, pixels);
    flop += 2.0 * static_cast<double>(time_dim * out);
  };
  auto attention = [&](int64_t ch, int64_t pixels) {
    flop += 2.0 * static_cast<double>(4 * pixels * ch * ch);      // q, k, v, out projections
    flop += 2.0 * static_cast<double>(2 * pixels * pixels * ch);  // scores and weighted sum
  };
  int64_t pixels = height * width, ch = base;
  conv(c.frame_channels + c.context_channels(), base, 3, pixels);
  std::vector<int64_t> skip_channels = {base};
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t out = base * c.channel_mults[static_cast<std::size_t>(l)];
    for (int64_t b = 0; b < c.res_blocks; ++b) {
      res_block(ch, out, pixels);
      ch = out;
      if (has_attention(c, l)) attention(ch, pixels);
      skip_channels.push_back(ch);
    }
    if (l + 1 < levels) {
      pixels /= 4;
      conv(ch, ch, 3, pixels);
      skip_channels.push_back(ch);
    }
  }
  res_block(ch, ch, pixels);
  attention(ch, pixels);
  res_block(ch, ch, pixels);
  for (int64_t l = levels - 1; l >= 0; --l) {
    const int64_t out = base * c.channel_mults[static_cast<std::size_t>(l)];
    for (int64_t b = 0; b <= c.res_blocks; ++b) {
      res_block(ch + skip_channels.back(), out, pixels);
      skip_channels.pop_back();
      ch = out;
      if (has_attention(c, l)) attention(ch, pixels);
    }
    if (l > 0) {
      pixels *= 4;
      conv(ch, ch, 3, pixels);
    }
  }
  conv(ch, c.output_channels(), 3, pixels);
  return flop * 1e-9;
}

Tensor timestep_embedding(const Tensor& timesteps, int64_t dim, DType dtype) {
  MIXPREC_CHECK(timesteps.dim() == 1 && dim >= 2 && dim % 2 == 0,
                "[timestep_embedding] expected timesteps [B] and an even dim, got ",
                shape_to_string(timesteps.shape()), " and ", dim);
  const int64_t b = timesteps.size(0), half = dim / 2;
  Tensor out = Tensor::empty({b, dim}, DType::F32);
  // One kernel (a graph replay reruns it on the timesteps it is given).
  capture::launch("timestep_embedding", {&timesteps}, {&out}, [b, dim, half](
                                                                  const capture::KernelArgs& a) {
    float* o = a.out(0).data<float>();
    for (int64_t i = 0; i < b; ++i) {
      const double t = a.in(0).value({i});
      for (int64_t k = 0; k < half; ++k) {
        const double freq =
            std::exp(-std::log(10000.0) * static_cast<double>(k) / static_cast<double>(half));
        o[i * dim + k] = static_cast<float>(std::sin(t * freq));
        o[i * dim + half + k] = static_cast<float>(std::cos(t * freq));
      }
    }
  });
  return out.to(dtype);
}

void load_extending(UNetVideo& model, const UNetVideo& source) {
  const UNetVideoConfig& c = model.config();
  const UNetVideoConfig& from = source.config();
  const bool adds_anchor = c.anchor_frame && !from.anchor_frame;
  const bool adds_motion = c.motion && !from.motion;
  const bool adds_flow_input = c.flow_input && !from.flow_input;
  const bool adds_reflect = c.reflect && !from.reflect;
  UNetVideoConfig expected = from;
  expected.anchor_frame = c.anchor_frame;
  expected.motion = c.motion;
  MIXPREC_CHECK((adds_anchor || adds_motion || adds_flow_input || adds_reflect) &&
                    c.anchor_frame >= from.anchor_frame && c.motion >= from.motion &&
                    c.flow_input >= from.flow_input && c.reflect >= from.reflect &&
                    c.name == expected.name &&
                    c.frame_channels == expected.frame_channels &&
                    c.base_channels == expected.base_channels &&
                    c.channel_mults == expected.channel_mults &&
                    c.res_blocks == expected.res_blocks &&
                    c.attention_levels == expected.attention_levels &&
                    c.head_dim == expected.head_dim && c.groups == expected.groups &&
                    c.context_frames == expected.context_frames &&
                    c.context_noise_level == expected.context_noise_level,
                "[load_extending] expected a model of the source's configuration ('", from.name,
                "', ", from.context_frames,
                " context frames) that adds an anchor frame, a motion output, a flow input or "
                "reflect gates to it");
  const int64_t fc = c.frame_channels;
  // Zero rows (dim 0) or columns (dim 1) of `count` inserted at `at` into a weight.
  auto insert_zeros = [](const Tensor& t, int64_t dim, int64_t at, int64_t count) {
    const Tensor w = t.to(DType::F32).contiguous();
    Shape zero_shape = w.shape();
    zero_shape[static_cast<std::size_t>(dim)] = count;
    return cat({w.narrow(dim, 0, at), Tensor::zeros(zero_shape),
                w.narrow(dim, at, w.size(dim) - at)},
               dim)
        .to(t.dtype())
        .contiguous();
  };
  nn::NamedTensors state = source.state_dict();
  for (auto& [name, tensor] : state) {
    // conv_in [O, (1 + K) * C, 3, 3] -> [O, (2 + K) * C, 3, 3]: the anchor comes after the
    // noisy frame and before the context frames.
    if (adds_anchor && name == "conv_in.weight") tensor = insert_zeros(tensor, 1, fc, fc);
    // ... and the previous flow after everything: [O, (1 + F) * C + 2, 3, 3].
    if (adds_flow_input && name == "conv_in.weight")
      tensor = insert_zeros(tensor, 1, tensor.size(1), 2);
    // conv_out [C, ch, 3, 3] and [C] -> [C + 2, ...]: the flow comes after the frame.
    if (adds_motion && (name == "conv_out.weight" || name == "conv_out.bias"))
      tensor = insert_zeros(tensor, 0, fc, 2);
    // ... and the reflect gates after everything (zero logits: never reflecting).
    if (adds_reflect && (name == "conv_out.weight" || name == "conv_out.bias"))
      tensor = insert_zeros(tensor, 0, tensor.size(0), 2);
  }
  model.load_state_dict(state);
}

}  // namespace mixprec::models
