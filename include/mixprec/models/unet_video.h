#pragma once
// UNetVideo: the denoiser of live-stream video diffusion. It generates one frame at a time,
// conditioned on the frames before it: the input is the noisy current frame channel-concatenated
// with the previous (context) frames, plus the diffusion timestep.
//
//   x_t [B, 3, H, W] ++ context [B, 3K, H, W] -> conv_in -> down path (ResBlocks, stride-2
//   convs, skips kept) -> middle (ResBlock, self-attention, ResBlock) -> up path (ResBlocks on
//   concat(h, skip), nearest 2x + conv) -> GroupNorm+SiLU -> conv_out -> [B, 3, H, W]
//
// ResBlock: GroupNorm+SiLU -> 3x3 conv -> + Linear(SiLU(time embedding)) per channel ->
// GroupNorm+SiLU -> 3x3 conv, plus the input (through a 1x1 conv when channels change).
// Self-attention runs at the resolutions Config::attention_levels names (and always in the
// middle), over the H*W pixels as tokens: in channels_last memory [B, H*W, C] is a view.
//
// Context: K = Config::context_frames previous frames, oldest first. One frame shows where the
// shapes are; two also show where they are going (the dataset's motion is constant velocity), so
// a stream can follow the true trajectory instead of guessing a direction every frame.
// Anchor frame (Config::anchor_frame): the stream's first, real frame goes in front of the
// context, however old it gets. The moving-shapes background never moves and the shapes never
// change colour, so the anchor shows what every still pixel and every shape should look like: a
// stream that has drifted can be pulled back to it (StreamingT2V's appearance anchor, as one
// more input frame).
// Motion (Config::motion, direct predictors): the network also outputs a flow, two channels of
// pixel offsets, and the next frame is the newest context frame warped by it (ops warp: each
// pixel reads where its content was) plus the predicted change. Moving a shape is then a smooth,
// nearly constant field over it instead of a new drawing of its edges every frame: an unsure
// model moves the shape a little wrongly instead of fading it into the background.
// Anchor map (Config::anchor_map, a motion model with an anchor): the frame is not the newest
// context frame warped but the anchor warped, through a displacement map the stream carries and
// composes with each frame's flow (anchor_map_frame, video_diffusion.h). Every frame is then
// one bilinear read of a real frame, so the blur of warping does not compound over a stream and
// a shape's colours cannot drift; the change channel paints only what the anchor cannot show.
// Flow input (Config::flow_input, an anchor-map model): the flow the network predicted for the
// previous frame is two more input channels (zero for a stream's first frame). The data moves at
// constant velocity between bounces, so the next flow is mostly the last one: a network that must
// measure each frame's motion anew from the frames measures it short (on held-out videos, one
// step from true frames, the flow came out at 0.6-0.7 of the true motion), and a stream that
// feeds it its own short motion slows down frame by frame until the shapes stand still.
// Reflect (Config::reflect, an anchor-map model): two more gate logits, one per axis, each an
// exact 0/1 step that flips the sign of the flow along its axis. The data's shapes keep their
// speed and turn back where an edge meets a wall; a flow that must regress through zero to turn
// hedges toward it where the turn's timing is unsure, and a stream turns that hedge into a stop
// (a stopped shape's flow carries no speed any more). With the gates, a turn is a decision and
// the flow's magnitude is kept.
// Noise-level conditioning (Config::context_noise_level): history augmentation corrupts the
// context with noise of a random std sigma; a conditioned model is also told sigma (its sinusoidal
// embedding, of 1000 sigma, joins the timestep's), so it need not guess how much to trust the
// context, and a stream can choose the level it conditions on (GameNGen's scheme).
//
// Dtypes: the network runs in its input's dtype. For true half precision call
// `model.to(DType::BF16)` (GroupNorm parameters stay f32) and pass bf16 frames; the timestep
// embedding is made in the input's dtype too, so nothing is promoted back to f32 on the way.
// Channel counts are multiples of 16 (one AVX-512 vector of f32, half a cache line of bf16).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/nn/layers.h"

namespace mixprec::models {

struct UNetVideoConfig {
  std::string name = "custom";
  int64_t frame_channels = 3;
  int64_t base_channels = 32;
  std::vector<int64_t> channel_mults = {1, 2, 2};  // one entry per level (resolution)
  int64_t res_blocks = 1;                          // per level on the way down (+1 up)
  std::vector<int64_t> attention_levels = {};      // levels with self-attention (middle always)
  int64_t head_dim = 32;                           // attention heads = channels / head_dim
  int64_t groups = 8;                              // GroupNorm groups
  int64_t context_frames = 1;                      // previous frames in the input, >= 1
  bool context_noise_level = false;                // the context's noise std is an input
  bool anchor_frame = false;                       // the stream's first frame leads the context
  bool motion = false;                             // two more outputs: a flow (see motion_flow)
  bool anchor_map = false;  // frames are read from the anchor through a composed map (motion)
  // An anchor-map model's previous flow is an input after the context frames (two channels).
  bool flow_input = false;
  // An anchor-map model's flow is flipped per axis by two more gates (see anchor_map_frame).
  bool reflect = false;
  // Frames in the context input: the anchor (if any), then the context frames.
  int64_t input_frames() const { return context_frames + (anchor_frame ? 1 : 0); }
  // Channels of the context input: its frames', then the previous flow's.
  int64_t context_channels() const {
    return input_frames() * frame_channels + (flow_input ? 2 : 0);
  }
  // Channels of the prediction: the frame's, then the flow's two for a motion model, then an
  // anchor-map model's two gates, then a reflecting model's two.
  int64_t output_channels() const {
    return frame_channels + (motion ? 2 : 0) + (anchor_map ? 2 : 0) + (reflect ? 2 : 0);
  }

  // The presets of issue #6 (frames 64x64): base 32 / 3 levels; base 64 with 2 blocks and
  // attention at 16x16; base 128; and an ~880M-parameter model of the seed documents' size.
  static UNetVideoConfig lightweight();
  static UNetVideoConfig medium();
  static UNetVideoConfig heavy();
  static UNetVideoConfig xl();
  static UNetVideoConfig preset(const std::string& name);  // Error listing the names
};

class UNetVideo final : public nn::Module {
 public:
  explicit UNetVideo(UNetVideoConfig config, Generator& gen = default_generator());
  std::string_view type_name() const override { return "UNetVideo"; }

  // x_t [B, 3, H, W] (H, W divisible by 2^(levels-1)), context [B, Config::context_channels(),
  // H, W] (Config::input_frames() frames concatenated on channels: the anchor if any, then the K
  // context frames oldest first; then the previous flow), timesteps [B] (any dtype, diffusion steps as
  // numbers), context_sigma [B] (the context's noise std; undefined means 0; ignored unless
  // Config::context_noise_level) -> the prediction [B, Config::output_channels(), H, W] in x_t's
  // dtype and layout.
  Tensor forward(const Tensor& x_t, const Tensor& context, const Tensor& timesteps,
                 const Tensor& context_sigma = {});

  const UNetVideoConfig& config() const { return config_; }
  int64_t parameter_count() const;
  // Activation checkpointing (training memory for compute): each encoder and decoder block keeps
  // only its inputs and recomputes its activations in backward (nn::checkpoint). The forward is
  // the same bits; the gradients of inputs several blocks share (the time embedding, the skips)
  // are summed in another order. The middle blocks, at the lowest resolution, are not worth it.
  void set_activation_checkpointing(bool on) { checkpoint_blocks_ = on; }
  // Multiply-adds x 2 of one forward at batch 1 and height x width, counted layer by layer
  // (convolutions, linears, attention); elementwise work and norms are not counted.
  double gflop_per_forward(int64_t height, int64_t width) const;

  class ResBlock;
  class AttentionBlock;

 private:
  UNetVideoConfig config_;
  bool checkpoint_blocks_ = false;
  std::shared_ptr<nn::Linear> time_fc1_, time_fc2_;
  std::shared_ptr<nn::Conv2d> conv_in_, conv_out_;
  std::shared_ptr<nn::GroupNorm> norm_out_;
  struct Level {
    std::vector<std::shared_ptr<ResBlock>> blocks;
    std::vector<std::shared_ptr<AttentionBlock>> attention;  // one per block, or empty
    std::shared_ptr<nn::Conv2d> resample;                    // down: stride 2; up: after 2x
  };
  std::vector<Level> down_, up_;  // up_[0] is the deepest level
  std::shared_ptr<ResBlock> mid1_, mid2_;
  std::shared_ptr<AttentionBlock> mid_attention_;
};

// Fine-tuning a model with an anchor frame, a motion output, a flow input or reflect gates from
// one without: `model` takes every weight of `source` (the same configuration, without the
// anchor, motion, flow input and/or reflect gates `model` adds); conv_in's weights for the
// anchor's and the previous flow's channels are zero, and so are conv_out's weights and biases
// for the flow and the reflect gates, so it starts out computing exactly what `source` computes
// (whatever the anchor and previous flow; with a zero flow; never reflecting: a gate opens only
// for a logit > 0). Throws mixprec::Error if the configurations differ otherwise.
void load_extending(UNetVideo& model, const UNetVideo& source);

// [B] timesteps -> [B, dim] sinusoidal features (Transformer/DDPM style, f32 math, rounded once
// into `dtype`): the first half sin(t * f_i), the second cos(t * f_i), f_i = 10000^(-i/(dim/2)).
Tensor timestep_embedding(const Tensor& timesteps, int64_t dim, DType dtype);

}  // namespace mixprec::models
