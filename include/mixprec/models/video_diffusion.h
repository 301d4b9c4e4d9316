#pragma once
// Live-stream video diffusion on UNetVideo: the training loss and the sampling of next frames
// (the frame-by-frame streams are in video_streams.h).
//
// Each frame is sampled by DDIM conditioned on the previous frames. Generated frames are never
// perfect, and conditioning on them feeds the errors back (drift). History augmentation is the
// remedy used here (docs/VIDEO.md): during training the context frames are corrupted with
// Gaussian noise of a random strength sigma ~ U(0, context_noise_max) per sample, so the model
// learns to produce a clean next frame from imperfect previous ones instead of copying their
// artefacts; a model with Config::context_noise_level is also told sigma.
#include <cstdint>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"

namespace mixprec::models {

// What a direct predictor's rollout loss measures per pixel. Mse: the squared error, whose
// optimum is the mean of the possible next frames: where the model is unsure where an edge goes
// it draws a ramp, and a stream of such frames softens a little every frame. L1: the absolute
// error (Charbonnier, sqrt(d^2 + 1e-6) - 1e-3, smooth where d = 0), whose optimum is the
// per-pixel median: a pixel that is either shape or background gets one of the two values, so
// an unsure edge stays an edge.
enum class RegressionLoss { Mse, L1 };
RegressionLoss parse_regression_loss(const std::string& name);  // "mse" | "l1"

struct VideoLossOptions {
  Prediction prediction = Prediction::V;
  double context_noise_max = 0.1;  // history augmentation; 0 turns it off
  // Max std (pixels) of a Gaussian blur applied to the context, per sample ~ U(0, max) and not
  // told to the model: a generator's errors are soft edges more than white noise, so the model
  // learns to restore sharp shapes from a softened history instead of copying the softness.
  double context_blur_max = 0;
  // Max std (pixels) of an unsharp mask, x + (x - blur(x)), applied to half the samples instead
  // of the blur (std ~ U(0, max), clamped to [-1, 1]). A restorer trained only to undo blur
  // overshoots edges into halos, and a stream feeds its halos back to it; trained to undo
  // both, it pulls a frame toward the data from either side. 0 turns it off.
  double context_sharpen_max = 0;
  // Direct predictors: each context frame draws its own blur or sharpening instead of all the
  // frames of a sample sharing one. A stream's frames are each a little soft or over-sharp in
  // their own way; a model that has seen two frames of differing sharpness learns that the
  // difference is not motion, and draws the next frame sharp from either.
  bool degrade_each_frame = false;
  // Round the clean context to 8-bit levels first (quantize_8bit), as a stream's context is.
  bool quantize_context = false;
  // Residual diffusion: the network denoises r = (frame - last) / 2, the change from the newest
  // context frame exactly as the network sees it (after quantization, blur and noise), instead
  // of the frame itself. Copying the last frame is then the zero prediction: a still background
  // costs the network nothing; and since the change also removes the context's noise, a stream
  // conditioned on a little noise cleans its own grain instead of accumulating it.
  bool residual = false;
  // Direct predictors (video_rollout_loss): before the unrolled frames that carry the gradient,
  // run the model freely, without a gradient, for f ~ U{0, ..., free_run_max} frames per batch
  // (the pushforward trick). The graded frames then start from the model's own f-frame-old
  // history, blur and drift included, and their targets stay the true frames: the model learns
  // to pull a long rollout back to sharp data at the cost of f cheap forwards, where unrolling
  // with the gradient costs a forward and a backward per frame and holds them all in memory.
  int64_t free_run_max = 0;
  // Weight of the per-pixel error on frames graded after a free run of f > 0 frames (1: as after
  // a true context). After a free run the model's shapes are no longer where the true frames
  // have them, so a per-pixel error there can only be lowered by drawing the average of where
  // they might be (blurred, or still); at 0 such frames are judged by the position-free terms
  // alone (--distribution), and the per-pixel error teaches the motion from true contexts only.
  double free_run_regression = 1.0;
  RegressionLoss regression = RegressionLoss::Mse;  // direct predictors only
  // Motion models (Config::motion): lambda times the mean absolute change the network adds after
  // warping (Charbonnier, as RegressionLoss::L1), per graded frame. Under positional
  // uncertainty a per-pixel loss is lowest for a shape eroded (l1) or blurred (mse) where it
  // may be; through the change channel that costs lambda per pixel and through the flow, which
  // moves a shape whole, nothing: with lambda < 1 the change still paints what no flow can
  // bring (background a shape uncovers), and shapes move rather than fade.
  double change_penalty = 0;
  // Anchor-map models (Config::anchor_map): weight of the map's and the gates' error against the
  // truth on every graded frame: the mean endpoint error of the map (sqrt(|d - d*|^2 + 1e-6),
  // pixels, where the true map is defined), plus the mean binary cross-entropy of the map gate
  // (open inside a shape, closed on background; outlines left out) and of the in-place gate on
  // background (the anchor where it shows background, else the last frame). A photometric loss
  // says nothing about the map inside a flat shape, where any map reads the same colour, until
  // the error reaches an edge frames later and tears the shape; and a gate unsure at an outline
  // closes there and erodes the shape a pixel at a time. A reflecting model's reflect gates
  // (UNetVideoConfig::reflect) add reflect_gate_loss against true_turns, and its frames are made
  // with the true turns (with_true_turns). 0: off.
  double map_weight = 0;
  // Anchor-map models: each unrolled frame becomes the next context as a rigid stream shows it
  // (anchor_map_frame with rigid: sprites cut at the first unrolled frame, moved by rigid fits,
  // over the clean plate; no gradient), and its rigid map is the one the next frame composes
  // with. The loss still grades the frame the network's own map and gates make (that carries the
  // gradient), but the network learns from the contexts a stream gives it, not from frames that
  // fray as a per-pixel map's do.
  bool rigid_context = false;
  // Flow-input models (Config::flow_input) with a map_target: the fraction of the samples whose
  // first step is given the true previous flow (the renderer's map of the newest context frame
  // with respect to the one before, 0 where it is undefined) instead of zero, as a stream is that
  // tracked the motion exactly. Given zero, the network must measure the motion from the frames;
  // given the truth, it learns that motion continues. 0: always zero (a stream's first frame).
  double true_flow_input = 0;
  // The truth for window frame `frame` with respect to window frame `anchor`
  // (data::MovingShapes::anchor_maps).
  std::function<data::AnchorMaps(int64_t anchor, int64_t frame)> map_target{};
};

// The denoising loss of one batch: context [B, 3K, H, W] (the K = Config::context_frames
// previous frames, oldest first, see context_of) and current [B, 3, H, W], frames in [-1, 1]
// (any float dtype). Draws timesteps, noise and the context corruption from `gen`; the
// network's input is made in `input_dtype` (the parameters' dtype for a half-precision model,
// f32 under autocast). Returns the f32 mean squared error against the eps or v target.
Tensor video_diffusion_loss(UNetVideo& model, const NoiseSchedule& schedule,
                            const Tensor& context, const Tensor& current,
                            const VideoLossOptions& options, DType input_dtype, Generator& gen);

// The regression loss of a direct predictor (Prediction::Direct), unrolled through its own
// outputs: `window` holds options.free_run_max + K frames (K = Config::context_frames) and then
// N >= 1 targets
// ([B, 3, H, W] each, oldest first, in [-1, 1]). Each predicted frame (clamped, 8-bit by a
// straight-through rounding when options.quantize_context) replaces the oldest context frame of
// the next prediction, with its gradient: the loss sees what the model's own errors do one, two,
// ... frames later, so it learns not to make the ones that compound (blur that spreads, colour
// that drifts), not only to be close one frame ahead. The context corruption (blur on the true
// frames, noise of std sigma ~ U(0, max) per sample on every input, told to a noise-level
// model) follows `options`; a residual model's change is added to the newest context frame
// before any noise, as a stream adds it to the frame its viewer saw. With a free run of f
// frames the context starts f frames before the last K of the first free_run_max + K, and the f
// frames between are the model's own (see VideoLossOptions::free_run_max). Returns the f32 mean
// error of the N frames (options.regression), averaged, plus options.change_penalty's term.
// An anchor model (Config::anchor_frame) also takes `anchor` [B, 3, H, W]: a real frame of the
// same video, as a stream's first frame is; it is rounded to 8 bits and never corrupted.
// `shown`, when given, receives the clip an adversary judges (video_critic.h): the K context
// frames the graded frames were predicted from (without a gradient; after a free run the
// model's own), then the N graded frames as a stream shows them (clamped, 8-bit by the
// straight-through rounding, with their gradient). Its true counterpart is window's last K + N
// frames, 8-bit.
Tensor video_rollout_loss(UNetVideo& model, const std::vector<Tensor>& window,
                          const VideoLossOptions& options, DType input_dtype, Generator& gen,
                          const Tensor& anchor = {}, std::vector<Tensor>* shown = nullptr);

// Where the renderer's shapes turn, for a reflecting model (UNetVideoConfig::reflect): from the
// true motion into the previous frame (`before`: its maps with respect to the frame before it)
// and into this one (`now`). Per axis, graded are the pixels inside a shape (layer 1, valid) in
// both whose shape's centre moved along the axis by at least 0.05 px in both frames; turned are
// those where the two motions have opposite signs. The centre's motion, not the pixel's offset:
// a spinning shape's pixels move every way, and the spin would drown the turn. A pixel compares
// the two at its own place: a shape moves a pixel or two a frame, so its inside overlaps itself.
// [B, 2, H, W] f32 each, 1 or 0.
struct TurnTruth {
  Tensor turned, graded;
};
TurnTruth true_turns(const data::AnchorMaps& before, const data::AnchorMaps& now);

// The reflect gates' loss (VideoLossOptions::map_weight): the mean binary cross-entropy of
// `logits` [B, 2, H, W] (x, y) against truth.turned over the graded pixels (0 when none are).
Tensor reflect_gate_loss(const Tensor& logits, const TurnTruth& truth);

// A reflecting model's prediction [B, C + 6, H, W] with its reflect logits (the last two
// channels) decided by the truth where it is graded: +1 where the shapes turn, -1 where they do
// not, the network's own elsewhere. A reflecting model's rollout (video_rollout_loss with a
// map_weight) makes its frames from this: the flow the loss grades is the network's continued
// motion turned where the data turns, so the flow learns the speed and the gates alone learn
// when to turn. Graded against turns it cannot be sure of, a flow regresses toward their mean,
// which shrinks the speed near every wall, the hedge that stops a stream's shapes.
Tensor with_true_turns(const Tensor& prediction, const TurnTruth& truth);

// Frames [B, 3, H, W] each (oldest first) -> the context [B, 3K, H, W], channels_last.
Tensor context_of(const std::vector<Tensor>& frames);

// Frames in [-1, 1] (any float dtype) -> the same values rounded to the 256 levels of an 8-bit
// image by the byte mapping of the PNG and GIF writers (io::float_to_byte), as f32
// byte / 127.5 - 1. A stream feeds back exactly what a viewer sees, and errors below half a
// level cannot accumulate.
Tensor quantize_8bit(const Tensor& frames);

// frames [B, C, H, W] -> each sample blurred by a separable Gaussian of std sigma[b] pixels
// (0: unchanged; edges replicated), f32, channels_last.
Tensor blur_frames(const Tensor& frames, const std::vector<double>& sigma);

// The context as a training step shows it to the model, before any noise: 8-bit if
// options.quantize_context, then per sample blurred (std ~ U(0, context_blur_max)) or, for half
// the samples when context_sharpen_max > 0, unsharp-masked (std ~ U(0, context_sharpen_max)),
// clamped to [-1, 1]. f32, channels_last.
Tensor degrade_context(const Tensor& context, const VideoLossOptions& options, Generator& gen);

// The next frame of every sample: DDIM over `steps` steps from `noise` [B, 3, H, W] conditioned
// on `context` [B, 3F, H, W] (F = Config::input_frames(): with_anchor's result for an anchor
// model) (and its noise std `context_sigma` [B], or undefined), the network
// run on `input_dtype` inputs; a direct predictor runs once and ignores `noise` and `steps`. For
// a residual model `last` [B, 3, H, W] is the frame the change is added to (a diffusion model's:
// the newest frame of `context`, noise included; a direct model's: that frame before the noise);
// undefined otherwise. No gradient. Returns [B, 3, H, W] f32 in [-1, 1].
Tensor sample_next_frames(UNetVideo& model, const NoiseSchedule& schedule, const Tensor& context,
                          const Tensor& context_sigma, const Tensor& noise, int64_t steps,
                          Prediction prediction, DType input_dtype, const Tensor& last = {});

// An anchor-map model's frame (UNetVideoConfig::anchor_map). `prediction` [B, 7, H, W] is the
// network's change (3 channels), flow f (2) and two gate logits, and a reflecting model's
// [B, 9, H, W] two more (UNetVideoConfig::reflect): f's x and y are multiplied by -1 where
// their step is 1; `displacement` d [B, 2, H, W]
// (pixels, f32) maps each pixel of the previous frame to where its content is in `anchor`
// [B, 3, H, W] (zeros for the anchor itself). The flow composes with it, gated:
// d' = step(gate) * (f + warp(d, f)), the step's gradient the sigmoid's. An open pixel (gate > 0)
// reads where its content was one frame ago and, from there, where that was in the anchor: a
// moving shape. A closed one reads, by the second gate, the anchor in place (background the
// anchor shows, exact whatever happened since) or `last` [B, 3, H, W], the previous frame, in
// place (background the anchor does not show, once painted by the change). (Kept composing, a
// pixel a shape uncovers would keep the shape's map and trail it.) The frame is that read
// plus twice the change, unclamped. Inside a rigidly moving shape d is affine, so reading it
// bilinearly is exact, and a shape is one bilinear read of a real frame however long the stream:
// the blur of warping does not compound. Differentiable.
struct AnchorMapFrame {
  Tensor frame;         // [B, 3, H, W] f32
  Tensor displacement;  // d' [B, 2, H, W] f32
  Tensor gate;          // [B, 1, H, W] f32: 1 where the map is open, else 0
  Tensor flow;          // f [B, 2, H, W] f32, as the network predicted it, reflected (flow_input)
  Tensor support;       // with `rigid`: the sprites (rigid_layers), else undefined
  Tensor plate;         // with `rigid`: the clean plate (clean_plate), else undefined
};
// With `rigid` (no gradient), the map and the open gate are rigid_layers(d', open, support,
// displacement)'s, and the frame is only the sprites over the clean plate:
//   frame = open · warp(anchor, d') + (1 - open) · plate
// where plate is clean_plate(anchor, support), made when `plate` is undefined (a stream's first
// frame; later frames pass the one it made)
// (no change painted, no gate for the anchor in place, no copy of `last`: a frame is made of the
// anchor alone, so nothing a frame gets wrong is carried into the next).
AnchorMapFrame anchor_map_frame(const Tensor& prediction, const Tensor& anchor,
                                const Tensor& last, const Tensor& displacement, bool rigid = false,
                                const Tensor& support = Tensor(), const Tensor& plate = Tensor());

// An anchor map and its open gate made rigid: each moving shape a sprite cut once from the
// anchor and moved as one rigid body. displacement [B, 2, H, W] f32 (d'), open [B, 1, H, W] (1
// where the map is open), support [B, 1, H, W] (the sprites: anchor pixels labelled 1, 2, ... by
// sprite, 0 for none; undefined on a stream's first frame, which makes it).
//   - Regions: 4-connected open pixels whose neighbours read anchor points about a pixel apart (a
//     rigid map keeps distances however far it has turned; two shapes crossing read points far
//     apart and stay two regions). Regions of fewer than 8 pixels (scraps of outline) are left
//     out.
//   - Sprites (first frame): where the regions read in the anchor [B, C, H, W], grown by a pixel
//     (the anti-aliased outline), split along the anchor's edges (per-channel central
//     difference over 0.1): each flat inside is a sprite, and each outline pixel joins the
//     nearest inside. Two shapes touching in the anchor are two sprites, however alike their
//     first maps.
//   - Each sprite moves by the rotation and translation that fit the maps of the open pixels
//     (of regions of 8 or more) reading inside it best (least squares, closed form; fitted again
//     without the pixels more than a pixel off, so a frayed outline does not pull it), and is
//     open exactly at the pixels
//     that motion takes into it: the whole shape, whatever the gate left out or added. Given the
//     frame's `flow` f [B, 2, H, W] and `previous`, a pixel moves a sprite the previous map moved
//     only if f takes it onto that sprite in the previous frame: the gate also opens on the trail
//     between where a shape was in the anchor and where it is now, whose pixels read the
//     background in place, inside the shape's anchor pixels, and would pull it back. A sprite
//     no region reads stays where `previous` (the last frame's map, if given) had it. Closed
//     pixels within 3 pixels of a sprite keep its motion in the map (open stays 0 there): the
//     next frame composes with the map bilinearly, and a 0 beside a sprite's edge would pull the
//     sprite back toward where the anchor had it.
// Why: a per-pixel map and gate, each a little wrong every frame, compound: a shape read through
// them frays, rounds off and leaves fragments of its outline behind. The shapes of this data move
// rigidly (they translate and spin), so the network's flow and gates decide how each moves, and
// the shape itself is the anchor's. Not differentiable (a stream's sampling step, not training's).
// The anchor without its sprites: anchor [B, C, H, W], support [B, 1, H, W] (rigid_layers) ->
// the anchor more than a pixel away from every sprite, and under each sprite and the pixel
// around it the background filled in from around (peeled from the outside in: each pixel the
// mean of its already known 8-neighbours; the extra pixel takes away what of a shape's outline
// its sprite left out, which would stay behind, still). What a rigid stream shows where no
// sprite is.
Tensor clean_plate(const Tensor& anchor, const Tensor& support);

struct RigidLayersResult {
  Tensor displacement, open, support;  // [B, 2, H, W], [B, 1, H, W], [B, 1, H, W] f32
};
RigidLayersResult rigid_layers(const Tensor& displacement, const Tensor& open,
                               const Tensor& anchor, const Tensor& support = Tensor(),
                               const Tensor& previous = Tensor(), const Tensor& flow = Tensor());

// An anchor-map model's next frames, as a stream makes them (no gradient): the network once on
// `context` (with_anchor's result, the anchor in front) and `context_sigma`, then
// anchor_map_frame (rigid or not, with the stream's sprites) with the frame clamped to [-1, 1].
AnchorMapFrame sample_anchor_map_frames(UNetVideo& model, const Tensor& context,
                                        const Tensor& context_sigma, const Tensor& anchor,
                                        const Tensor& last, const Tensor& displacement,
                                        bool rigid = false, const Tensor& support = Tensor(),
                                        const Tensor& plate = Tensor());

// frames [B, 3, H, W] in [-1, 1] -> the same frames restored by `restorer` (a direct residual
// model with one context frame, `video train --restorer`): frames + 2 * its change, clamped to
// [-1, 1], f32. No gradient. What a stream runs on every frame it predicts.
Tensor restore_frames(UNetVideo& restorer, const Tensor& frames);

// The network's context input: `anchor` [B, 3, H, W] (Config::anchor_frame) in front of
// `context` [B, 3K, H, W], channels_last in context's dtype; `context` itself when `anchor` is
// undefined.
Tensor with_anchor(const Tensor& anchor, const Tensor& context);
// ... and a flow-input model's (Config::flow_input): `context` with `flow` [B, 2, H, W] (the
// previous frame's flow, AnchorMapFrame::flow) after it, in context's dtype; `context` itself
// when `flow` is undefined.
Tensor with_flow(const Tensor& context, const Tensor& flow);

// frame, last [B, 3, H, W] -> frame, except that every pixel whose change from `last` is below
// `threshold` in all channels takes last's value: in this dataset a still pixel does not change
// at all, so a small sampled change there is the sampler's error, and keeping it would let
// errors too small to see add up over hundreds of frames into a colour drift.
Tensor keep_still_pixels(const Tensor& frame, const Tensor& last, double threshold);

// The dtype a module's parameters are stored in (its first floating non-norm parameter's).
DType parameter_dtype(const UNetVideo& model);

}  // namespace mixprec::models
