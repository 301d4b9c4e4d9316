#include "mixprec/models/video_streams.h"

#include "mixprec/mode/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"

namespace mixprec::models {

BatchedVideoStream::BatchedVideoStream(UNetVideo& model, NoiseSchedule schedule,
                                       const std::vector<Tensor>& first_frames,
                                       StreamOptions options, const std::vector<Tensor>& anchors)
    : model_(model),
      schedule_(std::move(schedule)),
      options_(options),
      model_dtype_(parameter_dtype(model)) {
  MIXPREC_CHECK(!first_frames.empty(), "[BatchedVideoStream] no streams");
  set_options(options);
  const int64_t k = model.config().context_frames;
  std::vector<Tensor> contexts;
  for (const Tensor& f : first_frames) {
    MIXPREC_CHECK(f.dim() == 4 && f.size(0) == k && f.shape() == first_frames[0].shape(),
                  "[BatchedVideoStream] expected the first frames of every stream as [", k,
                  ", 3, H, W] (the model's context frames, one size for all), got ",
                  shape_to_string(f.shape()));
    // [K, 3, H, W] -> [1, 3K, H, W]: frame-major channels, oldest first, as VideoStream does.
    contexts.push_back(f.contiguous().reshape({1, k * f.size(1), f.size(2), f.size(3)}));
  }
  context_ = cat(contexts, 0).to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  const bool anchor_map = model.config().anchor_map;
  MIXPREC_CHECK(!anchor_map || (anchors.empty() && options.restorer == nullptr),
                "[BatchedVideoStream] an anchor-map model reads its frames from the newest first "
                "frame: it takes no anchor frames and no restorer");
  MIXPREC_CHECK(anchors.empty() || (model.config().anchor_frame &&
                                    anchors.size() == first_frames.size()),
                "[BatchedVideoStream] ", anchors.size(), " anchor frames for ",
                first_frames.size(), " streams of a model ",
                model.config().anchor_frame ? "with" : "without", " an anchor");
  if (model.config().anchor_frame) {
    std::vector<Tensor> own;
    for (std::size_t i = 0; i < first_frames.size(); ++i) {
      const Tensor a = !anchors.empty() ? anchors[i]
                       : anchor_map      ? first_frames[i].narrow(0, k - 1, 1)
                                         : first_frames[i].narrow(0, 0, 1);
      const Tensor& f = first_frames[0];
      MIXPREC_CHECK(a.dim() == 4 && a.size(0) == 1 && a.size(1) == f.size(1) &&
                        a.size(2) == f.size(2) && a.size(3) == f.size(3),
                    "[BatchedVideoStream] expected an anchor frame [1, ", f.size(1), ", ",
                    f.size(2), ", ", f.size(3), "], got ", shape_to_string(a.shape()));
      own.push_back(quantize_8bit(a));
    }
    if (anchor_map) map_source_ = cat(own, 0).to(DType::F32).contiguous(MemoryFormat::ChannelsLast);
    anchors_ = cat(own, 0).to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  }
  if (anchor_map) {
    last_shown_ = map_source_;
    displacement_ = Tensor::zeros({streams(), 2, context_.size(2), context_.size(3)}, DType::F32,
                                  MemoryFormat::ChannelsLast);
    if (model.config().flow_input) previous_flow_ = displacement_;
  }
}

void BatchedVideoStream::set_options(const StreamOptions& options) {
  MIXPREC_CHECK(options.context_noise >= 0 && options.still_threshold >= 0 &&
                    options.anchor_refresh >= 0,
                "[BatchedVideoStream] negative context noise, still threshold or anchor refresh");
  options_ = options;
  sampler_graph_.reset();
}

namespace {

// How a stream captures its sampler: the weights stay as they are for the stream's life, so
// what depends only on them and on the sampler's timesteps (embeddings, the time MLPs) is
// computed once, at capture. No pass that rounds differently: a replayed stream's frames are
// the eager stream's bit for bit (the model calls its fused kernels itself; the one add left,
// attention's residual, is a few microseconds of a frame).
graph::CaptureOptions sampler_capture() {
  graph::CaptureOptions capture;
  capture.fold_constants = true;
  capture.fuse_epilogues = false;
  return capture;
}

}  // namespace

Tensor BatchedVideoStream::next() {
  InferenceMode inference;
  const int64_t n = streams(), c = model_.config().frame_channels;
  // Each stream draws exactly what VideoStream::next draws for frame index_ of its seed, in the
  // same order (its noise, then its context noise), so the two agree sample for sample.
  // An anchor-map model predicts its map from the context alone: its sample noise is skipped,
  // not drawn (the generator is counter-based: the context noise after it stays the same).
  const bool anchor_map = displacement_.defined();
  std::vector<Tensor> noise, context;
  for (int64_t i = 0; i < n; ++i) {
    Generator gen;
    gen.set_state({options_.seed + static_cast<uint64_t>(i), static_cast<uint64_t>(index_) << 32});
    const Shape noise_shape{1, c, context_.size(2), context_.size(3)};
    if (anchor_map)
      gen.reserve_blocks(static_cast<uint64_t>(shape_numel(noise_shape) + 1) / 2);  // as randn
    else
      noise.push_back(Tensor::randn(noise_shape, gen));
    if (options_.context_noise > 0) {
      const Tensor own = context_.narrow(0, i, 1);
      context.push_back(
          add(own.to(DType::F32), mul(Tensor::randn(own.shape(), gen), options_.context_noise))
              .to(model_dtype_));
    }
  }
  if (displacement_.defined() && options_.anchor_refresh > 0 && index_ > 0 &&
      index_ % options_.anchor_refresh == 0)
    anchors_ = context_.narrow(1, context_.size(1) - c, c).contiguous(MemoryFormat::ChannelsLast);
  Tensor batch_context = context_, sigma;
  if (options_.context_noise > 0) {
    batch_context = cat(context, 0).contiguous(MemoryFormat::ChannelsLast);
    sigma = Tensor::full({n}, options_.context_noise);
  }
  // The newest frame of every stream: as the viewer saw it (the still pixels' reference, and
  // what a direct residual model's change is added to) and as the network sees it, noise
  // included (what a residual diffusion model's change is added to).
  auto newest_of = [&](const Tensor& contexts) {
    return contexts.narrow(1, contexts.size(1) - c, c);
  };
  if (anchor_map)
    return finish_frame(next_anchor_map_frames(with_anchor(anchors_, batch_context), sigma));
  const Tensor& base = options_.prediction == Prediction::Direct ? context_ : batch_context;
  const std::vector<Tensor> inputs{with_anchor(anchors_, batch_context), sigma, cat(noise, 0),
                                   options_.residual ? newest_of(base) : Tensor()};
  auto sample = [&model = model_, schedule = schedule_, steps = options_.steps,
                 prediction = options_.prediction, dtype = model_dtype_,
                 restorer = options_.restorer](const std::vector<Tensor>& in) {
    Tensor frames = sample_next_frames(model, schedule, in[0], in[1], in[2], steps, prediction,
                                       dtype, in[3]);
    if (restorer != nullptr) frames = restore_frames(*restorer, frames);
    return std::vector<Tensor>{frames};
  };
  Tensor frames;
  if (options_.graph) {
    if (sampler_graph_ == nullptr) {
      sampler_graph_ = std::make_unique<graph::CompiledFunction>(sample, sampler_capture());
    }
    frames = (*sampler_graph_)(inputs)[0];  // lives in the graph's arena until the next frame
    if (options_.still_threshold <= 0 && !options_.quantize) frames = frames.clone();
  } else {
    frames = sample(inputs)[0];
  }
  return finish_frame(frames);
}

Tensor BatchedVideoStream::finish_frame(Tensor frames) {
  const int64_t c = model_.config().frame_channels;
  if (options_.still_threshold > 0)
    frames = keep_still_pixels(frames, context_.narrow(1, context_.size(1) - c, c),
                               options_.still_threshold);
  if (options_.quantize) frames = quantize_8bit(frames);
  if (last_shown_.defined()) last_shown_ = frames.contiguous(MemoryFormat::ChannelsLast).clone();
  const Tensor newest = frames.to(model_dtype_).contiguous(MemoryFormat::ChannelsLast);
  context_ = context_.size(1) == c
                 ? newest
                 : context_of({context_.narrow(1, c, context_.size(1) - c), newest});
  ++index_;
  return frames;
}

Tensor BatchedVideoStream::next_anchor_map_frames(const Tensor& context, const Tensor& sigma) {
  const bool rigid = options_.rigid_maps;
  auto sample = [&model = model_, rigid](const std::vector<Tensor>& in) {
    const AnchorMapFrame next =
        sample_anchor_map_frames(model, in[0], in[1], in[2], in[3], in[4], rigid, in[5], in[6]);
    std::vector<Tensor> out{next.frame, next.displacement, next.flow};
    if (rigid && !in[5].defined()) {  // the first frame: the sprites and plate it made
      out.push_back(next.support);
      out.push_back(next.plate);
    }
    return out;
  };
  const std::vector<Tensor> inputs{with_flow(context, previous_flow_),
                                   sigma,
                                   map_source_,
                                   last_shown_,
                                   displacement_,
                                   rigid ? sprites_ : Tensor(),
                                   rigid ? plate_ : Tensor()};
  // The first rigid frame cuts the sprites, and is not what later frames replay.
  if (!options_.graph || (rigid && !sprites_.defined())) {
    const std::vector<Tensor> out = sample(inputs);
    displacement_ = out[1];
    if (previous_flow_.defined()) previous_flow_ = out[2].contiguous(MemoryFormat::ChannelsLast);
    if (rigid && !sprites_.defined()) {
      sprites_ = out[3];
      plate_ = out[4];
    }
    return out[0];
  }
  if (sampler_graph_ == nullptr) {
    sampler_graph_ = std::make_unique<graph::CompiledFunction>(sample, sampler_capture());
  }
  const std::vector<Tensor> out = (*sampler_graph_)(inputs);
  // They live in the graph's arena until the next replay, which reads the map: copy them out.
  displacement_ = out[1].clone();
  if (previous_flow_.defined()) previous_flow_ = out[2].contiguous(MemoryFormat::ChannelsLast).clone();
  return out[0].clone();
}

Tensor BatchedVideoStream::anchor(int64_t stream) const {
  MIXPREC_CHECK(stream >= 0 && stream < streams(), "[BatchedVideoStream] no stream ", stream, " (",
                streams(), " streams)");
  // An anchor-map stream has none to pass on: a continuing stream restarts its map.
  if (!anchors_.defined() || displacement_.defined()) return {};
  return anchors_.narrow(0, stream, 1).to(DType::F32).contiguous();
}

Tensor BatchedVideoStream::recent_frames(int64_t stream) const {
  MIXPREC_CHECK(stream >= 0 && stream < streams(), "[BatchedVideoStream] no stream ", stream, " (",
                streams(), " streams)");
  const Tensor own = context_.narrow(0, stream, 1).to(DType::F32).contiguous();
  const int64_t c = model_.config().frame_channels;
  return own.reshape({own.size(1) / c, c, own.size(2), own.size(3)});
}

}  // namespace mixprec::models
