// `mixprec video train`: trains a UNetVideo on the procedural moving-shapes videos with AdamW in
// mixed precision (autocast, or 16-bit weights with f32 master weights; GradScaler for f16),
// with a progress bar, periodic atomic checkpoints, exact resume, and a final model file that
// `mixprec video generate` loads.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "distributed.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_config.h"
#include "mixprec/amp/precision_probe.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/models/distribution_loss.h"
#include "mixprec/models/video_critic.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/precision.h"
#include "mixprec/models/mixed_precision_optimizer.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/ema.h"
#include "mixprec/optim/lr_schedule.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"
#include "progress.h"
#include "run_guard.h"
#include "video_train_parts.h"

namespace mixprec::app {
namespace {

int video_train(Args args, const Communicator& world) {
  std::string preset = "lightweight", precision = "bf16", prediction = "v",
              loss_name = "mse";
  RunDirOptions run{.out = "runs/video", .checkpoint_every = 250};
  int64_t steps = 2000, batch = 16, seed = 0, warmup = 100, size = 64;
  double change_penalty = 0.0, adversarial = 0.0, critic_lr = 2e-4, distribution = 0.0,
         map_supervision = 0.0, true_flow_input = 0.0, bounce_fraction = 0.0;
  double free_run_regression = 1.0;
  int64_t adversarial_from = 0, critic_width = 32;
  double lr = 2e-3, context_noise = 0.1, clip = 1.0, weight_decay = 0.0, context_blur = 0.0,
         context_sharpen = 0.0;
  double self_context = 0.0, stream_context_noise = 0.0, stream_still_threshold = 0.0;
  int64_t context_frames = 1, self_context_from = 0, self_context_steps = 2, unroll = 1,
          free_run = 0;
  bool noise_level = false, residual = false, anchor = false, motion = false, restorer = false,
       degrade_each_frame = false, anchor_map = false, rigid_context = false, flow_input = false,
       reflect = false;
  std::string init_from, rounding = "nearest", log_losses;
  int64_t grad_accum = 1, fallback_after = 10;
  bool checkpoint_activations = false;
  double ema = 0.0, loss_scale = 65536.0;
  ArgParser p("video train",
              "Train a UNetVideo denoiser on procedural moving-shapes videos (64x64 RGB), each\n"
              "frame conditioned on the previous one, in mixed precision.");
  p.option("--preset", &preset, "lightweight | medium | heavy");
  p.option("--precision", &precision,
           "auto | fp32 | bf16 | fp16 | bf16-params | fp16-params (see docs/VIDEO.md)");
  p.option("--steps", &steps, "optimizer steps in all (a resumed run continues to this)");
  p.option("--batch", &batch, "frame pairs per step");
  p.option("--lr", &lr, "peak AdamW learning rate (linear warm-up, cosine decay to 10%)");
  p.option("--warmup", &warmup, "warm-up steps");
  p.option("--weight-decay", &weight_decay, "AdamW weight decay");
  p.option("--clip", &clip, "gradient-norm clipping threshold (0 turns it off)");
  p.option("--grad-accum", &grad_accum,
           "micro-batches per optimizer step: a step on N x --batch windows in the memory of "
           "--batch (the windows are those of the N-times larger batch; docs/VIDEO.md)");
  p.flag("--checkpoint-activations", &checkpoint_activations,
         "keep only each encoder and decoder block's inputs and recompute the rest in backward "
         "(less memory, more compute; the same losses)");
  add_mixed_precision_options(p, rounding, fallback_after, loss_scale, log_losses);
  p.option("--ema", &ema,
           "decay of an exponential moving average of the weights, which the model file then "
           "holds (0.999: about the last 1000 steps; 0: off, the last weights)",
           {.min = 0, .max = 0.99999});
  p.option("--prediction", &prediction,
           "v | eps: what the diffusion network predicts; direct: the frame itself in one "
           "forward, no diffusion (docs/VIDEO.md)");
  p.option("--unroll", &unroll,
           "direct models: frames predicted in a row per sample, each from the ones before, "
           "with the gradient through all of them");
  p.option("--loss", &loss_name,
           "direct models: mse | l1, the per-pixel error (l1's median keeps unsure edges sharp; "
           "docs/VIDEO.md)");
  p.option("--free-run", &free_run,
           "direct models: before the unrolled frames, let the model run on its own outputs "
           "for 0..N frames (random per step, no gradient), so it learns to pull long rollouts "
           "back to the data");
  p.option("--free-run-regression", &free_run_regression,
           "direct models: weight of the per-pixel error on frames graded after a free run "
           "(1: as after a true context; 0: only the position-free terms judge them, the "
           "per-pixel error teaches motion from true contexts alone; docs/VIDEO.md)",
           {.min = 0, .max = 1});
  p.option("--context-noise", &context_noise,
           "history augmentation: max std of noise added to the context frame (0: off)");
  p.option("--context-frames", &context_frames,
           "previous frames the model sees (2 also shows the motion)");
  p.option("--context-blur", &context_blur,
           "history augmentation: max std (pixels) of a Gaussian blur of the context (0: off)");
  p.option("--context-sharpen", &context_sharpen,
           "max std (pixels) of an unsharp mask applied to half the contexts instead of the "
           "blur (a restorer then learns to undo over-sharpened edges too; 0: off)");
  p.flag("--degrade-each-frame", &degrade_each_frame,
         "direct models: each context frame draws its own --context-blur / --context-sharpen "
         "(the model learns that frames of differing sharpness are not motion)");
  p.option("--self-context", &self_context,
           "fraction of each batch whose newest context frame is the model's own prediction of "
           "it (trains on its own outputs; 0: off)");
  p.option("--self-context-from", &self_context_from, "the step --self-context starts at");
  p.option("--stream-context-noise", &stream_context_noise,
           "the context noise the model file recommends to streams (generate's default)");
  p.option("--stream-still-threshold", &stream_still_threshold,
           "the still-pixel threshold the model file recommends to streams (generate's default)");
  p.option("--self-context-steps", &self_context_steps,
           "DDIM steps of the model's own predictions");
  p.flag("--residual", &residual,
         "denoise the change from the last context frame instead of the frame (docs/VIDEO.md)");
  p.flag("--anchor", &anchor,
         "direct models: the stream's first frame goes in front of every context (an appearance "
         "anchor; --init from a model without one starts from its weights)");
  p.flag("--motion", &motion,
         "direct residual models: also predict a flow and warp the last frame by it before "
         "adding the change, so shapes move instead of being redrawn (docs/VIDEO.md; --init from "
         "a model without it starts from its weights)");
  p.flag("--anchor-map", &anchor_map,
         "direct residual models: a motion model with an anchor whose frames are read from the "
         "anchor (the newest real frame a stream starts from) through a map composed with each "
         "frame's flow, so warping never blurs a frame twice (implies --motion and --anchor; "
         "docs/VIDEO.md)");
  p.flag("--flow-input", &flow_input,
         "anchor-map models: the flow predicted for the previous frame is an input, so a motion "
         "continues instead of being measured anew from the frames each time (docs/VIDEO.md; "
         "--init from a model without it starts from its weights)");
  p.flag("--reflect", &reflect,
         "anchor-map models with --map-supervision: two more gates, one per axis, flip the "
         "flow's sign, trained on the renderer's turns, so a shape turns at a wall without "
         "losing its speed (docs/VIDEO.md; --init from a model without them starts from its "
         "weights, never reflecting)");
  p.option("--true-flow-input", &true_flow_input,
           "flow-input models with --map-supervision: the fraction of samples whose first step "
           "is given the true previous flow instead of zero (it learns that motion continues; "
           "0: a stream's first frame every time)");
  p.option("--bounce-fraction", &bounce_fraction,
           "direct models: the fraction of windows drawn so that a shape bounces off a wall at "
           "one of the frames the model predicts (uniform draws see few bounces, and a model that "
           "misses them drives shapes into the walls; 0: uniform draws)");
  p.flag("--rigid-context", &rigid_context,
         "anchor-map models: each unrolled frame becomes the next context as a stream shows it, "
         "its shapes rigid sprites cut from the anchor (video generate's default; docs/VIDEO.md)");
  p.option("--map-supervision", &map_supervision,
           "anchor-map models: weight of the endpoint error (pixels) of the model's map against "
           "the true one the renderer knows, where it is defined (0: off; docs/VIDEO.md)");
  p.flag("--restorer", &restorer,
         "direct residual models with 1 context frame: learn to restore a frame degraded by "
         "--context-blur and --context-noise (its context is the frame itself) instead of "
         "predicting the next one; streams run it on every frame they predict (video generate "
         "--restorer; docs/VIDEO.md)");
  p.option("--change-penalty", &change_penalty,
           "motion models: weight of the mean absolute change added after the warp, so shapes "
           "move with the flow instead of fading (0: off; below 1 so uncovered background can "
           "still be painted)");
  p.option("--distribution", &distribution,
           "direct models: weight of a position-free term, the sliced Wasserstein distance "
           "between the patches of each predicted frame pair and of the true pair, which an "
           "eroded, blurred, vanished or frozen shape pays and a crisp one a pixel off does not "
           "(0: off; docs/VIDEO.md)");
  p.option("--adversarial", &adversarial,
           "direct models: weight of an adversarial term, a critic judging the clip of context "
           "and predicted frames against true clips, so unsure shapes are drawn somewhere "
           "likely instead of blurred or eroded (0: off; docs/VIDEO.md)");
  p.option("--adversarial-from", &adversarial_from,
           "the step the predictor starts to get the adversarial term (the critic trains from "
           "the start)");
  p.option("--critic-lr", &critic_lr, "the critic's Adam learning rate (constant, beta1 0.5)");
  p.option("--critic-width", &critic_width, "channels of the critic's first layer");
  p.flag("--noise-level", &noise_level,
         "tell the model the context's noise std (noise-level conditioning)");
  p.option("--size", &size, "frame height and width");
  p.option("--seed", &seed, "seed of the initial weights, the data and the noise");
  add_run_dir_options(p, run, "directory for checkpoint.safetensors and model.safetensors");
  p.option("--init", &init_from,
           "start from this model file's weights (fine-tuning; a fresh optimizer); a resumed "
           "fine-tuning run names the same file, and the checkpoint's weights are loaded");
  if (!p.parse(args)) return 0;
  if (steps < 1 || batch < 1 || warmup < 1 || context_frames < 1 || self_context_steps < 1 ||
      unroll < 1)
    throw UsageError{
        "video train: --steps, --batch, --warmup, --context-frames, --self-context-steps and "
        "--unroll must be >= 1"};
  if (!(context_noise >= 0) || !(context_blur >= 0) || !(context_sharpen >= 0) || !(self_context >= 0 && self_context <= 1) ||
      !(stream_context_noise >= 0 && stream_context_noise <= 1) ||
      !(stream_still_threshold >= 0 && stream_still_threshold <= 1))
    throw UsageError{
        "video train: --context-noise, --context-blur and --context-sharpen must be >= 0, "
        "--self-context and "
        "--stream-context-noise and --stream-still-threshold in [0, 1]"};
  check_run_dir_options("video train", run);
  if (grad_accum < 1) throw UsageError{"video train: --grad-accum must be >= 1"};
  check_mixed_precision_options("video train", rounding, fallback_after, loss_scale);

  if (precision == "auto") {  // every rank trains in rank 0's measured choice
    precision = amp::PrecisionConfig::for_compute(amp::agreed_auto_precision(world)).name();
    if (world.is_root())
      std::fprintf(stderr, "video train: --precision auto -> %s\n",
                   amp::auto_precision().summary().c_str());
  }
  const amp::PrecisionConfig pc =
      parse_usage("video train", [&] { return amp::PrecisionConfig::parse(precision); });
  if (rounding == "stochastic" && !pc.half_params())
    throw UsageError{"video train: stochastic rounding rounds into 16-bit parameters, and "
                     "--precision " + pc.name() + " keeps them in f32: use bf16-params or "
                     "fp16-params"};
  const models::Prediction pred =
      parse_usage("video train", [&] { return models::parse_prediction(prediction); });
  const bool direct = pred == models::Prediction::Direct;
  if (unroll > 1 && !direct)
    throw UsageError{"video train: --unroll needs --prediction direct (a diffusion model's frames "
                     "are sampled without a gradient: use --self-context)"};
  const models::RegressionLoss regression =
      parse_usage("video train", [&] { return models::parse_regression_loss(loss_name); });
  if (regression != models::RegressionLoss::Mse && !direct)
    throw UsageError{"video train: --loss needs --prediction direct (diffusion trains on mse)"};
  if (free_run < 0 || (free_run > 0 && !direct))
    throw UsageError{"video train: --free-run must be >= 0 and needs --prediction direct"};
  if (free_run_regression != 1.0 && free_run == 0)
    throw UsageError{"video train: --free-run-regression weighs frames after a free run: it needs "
                     "--free-run"};
  if (anchor_map) {
    if (!(direct && residual))
      throw UsageError{"video train: --anchor-map needs --prediction direct and --residual"};
    motion = anchor = true;
  }
  if (rigid_context && !anchor_map)
    throw UsageError{"video train: --rigid-context needs --anchor-map"};
  if (flow_input && !anchor_map) throw UsageError{"video train: --flow-input needs --anchor-map"};
  if (reflect && !(anchor_map && map_supervision > 0))
    throw UsageError{"video train: --reflect needs --anchor-map and --map-supervision"};
  if (!(true_flow_input >= 0 && true_flow_input <= 1) ||
      (true_flow_input > 0 && !(flow_input && map_supervision > 0)))
    throw UsageError{"video train: --true-flow-input is a fraction in [0, 1] and needs "
                     "--flow-input and --map-supervision"};
  if (!(bounce_fraction >= 0 && bounce_fraction <= 1) ||
      (bounce_fraction > 0 && (!direct || (anchor && !anchor_map))))
    throw UsageError{"video train: --bounce-fraction is a fraction in [0, 1], for direct models "
                     "without a drawn anchor (--anchor alone)"};
  if (!(map_supervision >= 0) || (map_supervision > 0 && !anchor_map))
    throw UsageError{"video train: --map-supervision must be >= 0 and needs --anchor-map"};
  if (anchor && !direct)
    throw UsageError{"video train: --anchor needs --prediction direct"};
  if (motion && !(direct && residual))
    throw UsageError{"video train: --motion needs --prediction direct and --residual"};
  if (change_penalty < 0 || (change_penalty > 0 && !motion))
    throw UsageError{"video train: --change-penalty must be >= 0 and needs --motion"};
  if (!(adversarial >= 0) || (adversarial > 0 && !direct) || adversarial_from < 0 ||
      !(critic_lr > 0) || critic_width < 8 || critic_width % 8 != 0)
    throw UsageError{"video train: --adversarial must be >= 0 and needs --prediction direct; "
                     "--adversarial-from >= 0, --critic-lr > 0, --critic-width a multiple of 8"};
  if (!(distribution >= 0) || (distribution > 0 && !direct))
    throw UsageError{"video train: --distribution must be >= 0 and needs --prediction direct"};
  if (adversarial > 0 && grad_accum > 1)
    throw UsageError{"video train: --adversarial does not combine with --grad-accum (the critic "
                     "steps on every batch it judges)"};
  if (adversarial > 0 && world.distributed())
    throw UsageError{"video train: --adversarial does not run under mpirun yet (each rank would "
                     "train its own critic)"};
  if (restorer && !(direct && residual && context_frames == 1 && unroll == 1 && free_run == 0 &&
                    !anchor && !motion &&
                    (context_blur > 0 || context_sharpen > 0 || context_noise > 0)))
    throw UsageError{"video train: --restorer needs --prediction direct --residual "
                     "--context-frames 1, no --unroll, --free-run, --anchor or --motion, and a "
                     "degradation to undo (--context-blur, --context-sharpen or --context-noise)"};
  if (degrade_each_frame && !(direct && (context_blur > 0 || context_sharpen > 0)))
    throw UsageError{"video train: --degrade-each-frame needs --prediction direct and "
                     "--context-blur or --context-sharpen"};
  if (direct && self_context > 0)
    throw UsageError{"video train: a direct model trains on its own outputs with --unroll, "
                     "not --self-context"};
  const data::MovingShapes videos({.height = size, .width = size}, static_cast<uint64_t>(seed));
  Generator init(static_cast<uint64_t>(seed));
  models::UNetVideoConfig config =
      parse_usage("video train", [&] { return models::UNetVideoConfig::preset(preset); });
  config.context_frames = context_frames;
  config.context_noise_level = noise_level;
  config.anchor_frame = anchor;
  config.motion = motion;
  config.anchor_map = anchor_map;
  config.flow_input = flow_input;
  config.reflect = reflect;
  models::UNetVideo model(config, init);
  // A resumed run takes its weights from the checkpoint; --init is then only one of the settings
  // the checkpoint must share.
  if (!init_from.empty() && !run.resume) {
    models::VideoModelInfo from;
    const auto source = models::load_video_model(init_from, &from);
    if (from.config.name != preset || from.config.context_frames != context_frames ||
        from.config.context_noise_level != noise_level || from.residual != residual)
      throw UsageError{"video train: --init " + init_from + " holds a '" + from.config.name +
                       "' model with " + std::to_string(from.config.context_frames) +
                       " context frame(s)" + (from.config.context_noise_level ? ", noise level" : "") +
                       (from.residual ? ", residual" : "") +
                       ": pass the same --preset, --context-frames, --noise-level and --residual"};
    if ((from.config.anchor_frame && !anchor) || (from.config.motion && !motion))
      throw UsageError{"video train: --init " + init_from + " holds a model with " +
                       (from.config.anchor_frame && !anchor ? "an anchor: pass --anchor"
                                                            : "motion: pass --motion")};
    if (from.config.anchor_map && !anchor_map)
      throw UsageError{"video train: --init " + init_from +
                       " holds an anchor-map model: pass --anchor-map"};
    if (from.config.flow_input && !flow_input)
      throw UsageError{"video train: --init " + init_from +
                       " holds a model with a flow input: pass --flow-input"};
    if (from.config.reflect && !reflect)
      throw UsageError{"video train: --init " + init_from +
                       " holds a model with reflect gates: pass --reflect"};
    if (anchor == from.config.anchor_frame && motion == from.config.motion &&
        flow_input == from.config.flow_input && reflect == from.config.reflect)
      model.load_state_dict(source->state_dict());
    else
      models::load_extending(model, *source);
  }
  nn::broadcast_parameters(world, model.parameters());  // under mpirun: rank 0's weights
  model.set_activation_checkpointing(checkpoint_activations);
  // Under mpirun --batch is each rank's share of a global batch of ranks x --batch.
  models::MixedPrecisionOptimizer mp(
      model, {.precision = pc,
              .lr = lr,
              .weight_decay = weight_decay,
              .clip = clip,
              .rounding = rounding == "stochastic" ? optim::Rounding::Stochastic
                                                   : optim::Rounding::NearestEven,
              .seed = static_cast<uint64_t>(seed),
              .loss_scale = loss_scale,
              .fallback_after = models::trains_in_f16(pc) ? fallback_after : 0,
              .world = &world});
  std::optional<Adversary> adversary;
  if (adversarial > 0) {
    Generator critic_init(static_cast<uint64_t>(seed) ^ 0xc217ULL);
    adversary.emplace(context_frames + unroll, critic_width, critic_lr, pc, critic_init);
  }
  const models::NoiseSchedule schedule = models::NoiseSchedule::cosine(1000);

  // What a resumed run must share with its checkpoint to continue bit for bit (the stream
  // settings a model file recommends do not change training, so they may change on resume).
  RunSettings settings = {{"preset", preset},
                                {"precision", pc.name()},
                                {"seed", std::to_string(seed)},
                                {"batch", std::to_string(batch * world.size())},
                                {"prediction", prediction},
                                {"size", std::to_string(size)},
                                {"context-frames", std::to_string(context_frames)},
                                {"noise-level", noise_level ? "1" : "0"},
                                {"anchor", anchor ? "1" : "0"},
                                {"motion", motion ? "1" : "0"},
                                {"anchor-map", anchor_map ? "1" : "0"},
                                {"map-supervision", exact_text(map_supervision)},
                                {"rigid-context", rigid_context ? "1" : "0"},
                                {"flow-input", flow_input ? "1" : "0"},
                                {"true-flow-input", exact_text(true_flow_input)},
                                {"bounce-fraction", exact_text(bounce_fraction)},
                                {"change-penalty", exact_text(change_penalty)},
                                {"distribution", exact_text(distribution)},
                                {"adversarial", exact_text(adversarial)},
                                {"adversarial-from", std::to_string(adversarial_from)},
                                {"critic-lr", exact_text(critic_lr)},
                                {"critic-width", std::to_string(critic_width)},
                                {"residual", residual ? "1" : "0"},
                                {"context-noise", exact_text(context_noise)},
                                {"context-blur", exact_text(context_blur)},
                                {"self-context", exact_text(self_context)},
                                {"self-context-from", std::to_string(self_context_from)},
                                {"self-context-steps", std::to_string(self_context_steps)},
                                {"unroll", std::to_string(unroll)},
                                {"free-run", std::to_string(free_run)},
                                {"loss", loss_name},
                                {"lr", exact_text(lr)},
                                {"warmup", std::to_string(warmup)},
                                {"weight-decay", exact_text(weight_decay)},
                                {"clip", exact_text(clip)},
                                {"init", init_from}};
  // Recorded only when set, so that checkpoints from before the option resume as they were.
  if (free_run_regression != 1.0)
    settings.emplace_back("free-run-regression", exact_text(free_run_regression));
  if (restorer) settings.emplace_back("restorer", "1");
  if (context_sharpen > 0) settings.emplace_back("context-sharpen", exact_text(context_sharpen));
  if (degrade_each_frame) settings.emplace_back("degrade-each-frame", "1");
  if (reflect) settings.emplace_back("reflect", "1");
  // Checkpoints from before these controls lack them, and resume as they were.
  settings.emplace_back("grad-accum", std::to_string(grad_accum));
  settings.emplace_back("rounding", rounding);
  settings.emplace_back("ema", exact_text(ema));
  if (models::trains_in_f16(pc))
    settings.emplace_back("fallback-after", std::to_string(fallback_after));
  // Recomputed activations are the same bits, but the gradients of inputs several blocks share
  // (the time embedding, the skips) are summed in another order.
  settings.emplace_back("checkpoint-activations", checkpoint_activations ? "1" : "0");
  const std::string checkpoint = world.is_root()
                                     ? prepare_run_directory("video train", run.out, run.resume,
                                                             run.overwrite)
                                     : run.out + "/checkpoint.safetensors";
  const std::string critic_path = run.out + "/critic.safetensors";
  const std::string ema_path = run.out + "/ema.safetensors";
  std::optional<optim::WeightAverage> average;
  ResumePoint resumed;
  int64_t start = 0;
  if (run.resume) {
    resumed = check_resume("video train", checkpoint, settings, run.override, steps);
    if (resumed.finished) return 0;
    start = resumed.step;
    resume_fallback("video train", checkpoint, mp);  // before loading: it may change dtypes
    io::load_checkpoint(checkpoint, model, mp.optimizer(), &mp.scaler());
    if (adversary) load_critic(critic_path, start, *adversary);
  }
  if (ema > 0) {
    average.emplace(mp.optimizer(), ema);
    if (run.resume) load_average(ema_path, start, model, *average);
  }
  std::fprintf(stderr,
               "video train: %s (%lld parameters, %.2f GFLOP/forward), precision %s, batch "
               "%lld, %lld steps, prediction %s, %lld context frame(s), context noise <= %g%s\n",
               preset.c_str(), static_cast<long long>(model.parameter_count()),
               model.gflop_per_forward(size, size), pc.name().c_str(),
               static_cast<long long>(batch), static_cast<long long>(steps), prediction.c_str(),
               static_cast<long long>(context_frames), context_noise,
               noise_level ? " (the model is told its level)" : "");
  if (grad_accum > 1 || checkpoint_activations || rounding != "nearest" || ema > 0)
    std::fprintf(stderr, "video train: %s%s%s%s\n",
                 grad_accum > 1 ? (std::to_string(grad_accum) + " micro-batches of " +
                                   std::to_string(batch) + " per step; ").c_str()
                                : "",
                 checkpoint_activations ? "activation checkpointing; " : "",
                 rounding != "nearest" ? "stochastic rounding; " : "",
                 ema > 0 ? ("the model file holds the weights' moving average (decay " +
                            exact_text(ema) + ")").c_str()
                         : "");
  print_lr_schedule("video train", lr, warmup, steps);

  const io::SafetensorsMetadata run_info = {{"preset", preset},
                                            {"precision", pc.name()},
                                            {"seed", std::to_string(seed)},
                                            {"batch", std::to_string(batch)},
                                            {"prediction", prediction},
                                            {"size", std::to_string(size)}};
  const std::string model_path = run.out + "/model.safetensors";
  // The checkpoint (for --resume) and the model file (for generate) after every interval, so
  // an interrupted run leaves a usable model.
  auto save = [&](int64_t step, double loss) {
    check_replicas("video train", world, model.parameters(), step);
    if (!world.is_root()) return;  // rank 0 writes for every rank
    io::SafetensorsMetadata meta = run_info;
    add_settings(meta, settings);
    add_progress(meta, step, loss);
    add_fallback(meta, mp);
    // The critic and the average first: a crash between the writes leaves a checkpoint one
    // interval older than they are, which --resume reports rather than continuing from
    // mismatched parts.
    if (adversary)
      io::save_checkpoint(critic_path, adversary->critic, adversary->opt, &adversary->scaler,
                          {{"step", std::to_string(step)}});
    if (average) save_average(ema_path, step, model, *average);
    io::save_checkpoint(checkpoint, model, mp.optimizer(), &mp.scaler(), meta);
    models::VideoModelInfo info{.config = model.config(),
                                .prediction = pred,
                                .schedule_steps = schedule.steps(),
                                .residual = residual,
                                .extra = run_info};
    info.extra["train_steps"] = std::to_string(step);
    info.extra["context_noise"] = std::to_string(context_noise);
    info.extra["context_blur"] = std::to_string(context_blur);
    if (restorer) info.extra["restorer"] = "1";
    if (context_sharpen > 0) info.extra["context_sharpen"] = std::to_string(context_sharpen);
    if (degrade_each_frame) info.extra["degrade_each_frame"] = "1";
    info.extra["self_context"] = std::to_string(self_context);
    info.extra["unroll"] = std::to_string(unroll);
    info.extra["free_run"] = std::to_string(free_run);
    info.extra["regression_loss"] = loss_name;
    info.extra["adversarial"] = std::to_string(adversarial);
    info.extra["distribution"] = std::to_string(distribution);
    info.extra["stream_context_noise"] = std::to_string(stream_context_noise);
    info.extra["stream_still_threshold"] = std::to_string(stream_still_threshold);
    info.extra["loss"] = std::to_string(loss);
    if (!init_from.empty()) info.extra["init"] = init_from;
    if (average) info.extra["ema"] = exact_text(average->decay());
    // The model file holds the moving average where there is one: the weights to sample from.
    std::optional<optim::ScopedWeights> averaged;
    if (average) averaged.emplace(model.parameters(), average->averages());
    models::save_video_model(model_path, model, info);
  };

  LossMonitor monitor(0.98, resumed);
  const StopOnSignal stop;
  ProgressBar bar("video train", steps);
  StepLog loss_log("video train", "--log-losses", world.is_root() ? log_losses : "", resumed);
  double smoothed = monitor.smoothed();
  double step_seconds = 0;  // for the per-rank summary under mpirun
  for (int64_t step = start; step < steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    mp.begin(optim::warmup_cosine_lr(lr, step, warmup, steps));
    const amp::PrecisionConfig& now = mp.precision();  // bf16 after a fallback
    const DType input_dtype = now.half_params() ? now.params : DType::F32;
    // Every step's data and noise come from (seed, step) alone, so a resumed run draws exactly
    // what an uninterrupted one would.
    Generator gen;
    gen.set_state({static_cast<uint64_t>(seed) ^ 0x5eedULL, static_cast<uint64_t>(step) << 32});
    const int64_t own = step >= self_context_from
                            ? std::llround(self_context * static_cast<double>(batch))
                            : 0;
    // One frame more when the newest context frame is to be predicted from the ones before it.
    const int64_t length = free_run + context_frames + (own > 0 ? 1 : 0) + unroll;
    // An anchor-map model's anchor is its newest true context frame, which the loss takes from
    // the window itself.
    const bool drawn_anchor = anchor && !anchor_map;
    // The windows of the whole step (every micro-batch, every rank), drawn at once: micro-batch
    // k takes the k-th slice, as a step on the grad_accum-times larger batch would see them.
    const int64_t slice = batch * world.size();
    std::vector<data::WindowOrigin> all_origins;
    const std::vector<Tensor> all_windows =
        drawn_anchor ? videos.anchored_windows(slice * grad_accum, length, gen)
                     : videos.windows(slice * grad_accum, length, gen, DType::F32,
                                      MemoryFormat::ChannelsLast, &all_origins,
                                      {.fraction = bounce_fraction, .within = unroll});
    fork_per_rank(world, gen);
    double step_total = 0, critic_loss = 0, adversarial_loss = 0, distribution_loss = 0;
    for (int64_t k = 0; k < grad_accum; ++k) {
      // This rank's share of micro-batch k, as rank_share takes it.
      const int64_t first = k * slice + batch * world.rank();
      std::vector<data::WindowOrigin> origins;
      if (!all_origins.empty())
        origins.assign(all_origins.begin() + first, all_origins.begin() + first + batch);
      std::vector<Tensor> window;
      for (const Tensor& frames : all_windows)
        window.push_back(rank_share(world, frames.narrow(0, k * slice, slice)));
      // A restorer's context is its target frame itself, degraded by the loss's context options.
      if (restorer) window.front() = window.back();
      Tensor anchor_frames;
      if (drawn_anchor) {
        anchor_frames = window.front();
        window.erase(window.begin());
      }
      const models::VideoLossOptions loss_options = {.prediction = pred,
                                                     .context_noise_max = context_noise,
                                                     .context_blur_max = context_blur,
                                                     .context_sharpen_max = context_sharpen,
                                                     .degrade_each_frame = degrade_each_frame,
                                                     .quantize_context = true,
                                                     .residual = residual,
                                                     .free_run_max = free_run,
                                                     .free_run_regression = free_run_regression,
                                                     .regression = regression,
                                                     .change_penalty = change_penalty,
                                                     .map_weight = map_supervision,
                                                     .rigid_context = rigid_context,
                                                     .true_flow_input = true_flow_input,
                                                     .map_target = [&](int64_t a, int64_t f) {
                                                       return videos.anchor_maps(origins, a, f);
                                                     }};
      Tensor loss, total;
      {
        amp::Autocast autocast(now.autocast() ? now.compute : DType::BF16, now.autocast());
        if (direct) {
          std::vector<Tensor> shown;
          loss = models::video_rollout_loss(model, window, loss_options, input_dtype, gen,
                                            anchor_frames,
                                            adversary || distribution > 0 ? &shown : nullptr);
          total = loss;
          // The true frames of the shown clip, 8-bit as a viewer sees them.
          std::vector<Tensor> real(window.end() - static_cast<std::ptrdiff_t>(shown.size()),
                                   window.end());
          for (Tensor& frame : real) frame = models::quantize_8bit(frame);
          if (distribution > 0) {
            // Each predicted frame (the last `unroll` of the clip) with the frame before it,
            // against the true pair: patches that span two frames also see the motion. (Stacking
            // the frame with its change amplified 4x instead made shapes flicker: session 9.)
            Tensor term;
            for (int64_t i = 0; i < unroll; ++i) {
              const auto k = shown.size() - static_cast<std::size_t>(unroll - i);
              const Tensor pair_term = models::sliced_wasserstein_loss(
                  cat({shown[k - 1], shown[k]}, 1), cat({real[k - 1], real[k]}, 1), gen);
              term = term.defined() ? add(term, pair_term) : pair_term;
            }
            term = div(term, static_cast<double>(unroll));
            distribution_loss += term.item<double>() / static_cast<double>(grad_accum);
            total = add(total, mul(term, distribution));
          }
          if (adversary) {
            // The critic's step on this batch first (fake clips detached), then the predictor's
            // adversarial term against the updated critic.
            std::vector<Tensor> fake;
            for (const Tensor& frame : shown) fake.push_back(frame.detach());
            critic_loss = train_critic(*adversary, models::context_of(real),
                                       models::context_of(fake));
            if (step >= adversarial_from) {
              const Tensor term =
                  models::generator_adversarial_loss(adversary->critic, models::context_of(shown));
              adversarial_loss = term.item<double>();
              total = add(total, mul(term, adversarial));  // on top of the distribution term
            }
          }
        } else {
          Tensor context = models::context_of({window.end() - 1 - context_frames, window.end() - 1});
          if (own > 0)
            context = with_own_prediction(model, schedule, window, own, self_context_steps, pred,
                                          residual, input_dtype, gen, context);
          loss = models::video_diffusion_loss(model, schedule, context, window.back(), loss_options,
                                              input_dtype, gen);
          total = loss;
        }
      }
      step_total += total.item<double>();
      mp.backward(total, k, grad_accum);
    }
    mp.step();
    if (average && !mp.last_step_skipped()) average->update(mp.optimizer());
    const double seconds_of_step =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    step_seconds += seconds_of_step;
    const bool stop_requested = world.any(StopOnSignal::requested());  // every rank or none
    // The objective the step minimised: with --free-run-regression 0 the per-pixel part alone
    // is 0 on every step that graded after a free run.
    const double global_loss =
        world.all_reduce_sum(step_total / static_cast<double>(grad_accum)) / world.size();
    char line[80];
    std::snprintf(line, sizeof line, "%.9g %d %.6f", global_loss, mp.last_step_skipped() ? 1 : 0,
                  seconds_of_step);
    loss_log.write(step + 1, line);
    if (!monitor.observe(step, global_loss, mp.last_step_skipped())) break;
    if (mp.fell_back_at_last_step()) {
      bar.note("video train: step " + std::to_string(step + 1) + ": " + mp.fallback_reason() +
               ": falling back from " + pc.name() + " to " + mp.precision().name() +
               " (kept in the checkpoint; no checkpoint for the next " +
               std::to_string(kCleanStepsBeforeSaving) + " steps)");
      monitor.precision_changed(kCleanStepsBeforeSaving);
    }
    smoothed = monitor.smoothed();
    char metrics[160];
    char adversary_terms[48] = "", distribution_term[32] = "";
    if (adversary)
      std::snprintf(adversary_terms, sizeof adversary_terms, " | critic %.3f adv %.3f",
                    critic_loss, adversarial_loss);
    if (distribution > 0)
      std::snprintf(distribution_term, sizeof distribution_term, " | swd %.5f", distribution_loss);
    const std::string extra_terms = std::string(adversary_terms) + distribution_term;
    std::snprintf(metrics, sizeof metrics, "loss %.4f%s | lr %.2e%s", smoothed, extra_terms.c_str(),
                  mp.optimizer().lr(), mp.last_step_skipped() ? " | skipped (overflow)" : "");
    bar.update(step + 1, metrics);
    if (monitor.save_now((step + 1) % run.checkpoint_every == 0,
                         step + 1 == steps || stop_requested))
      save_checked(monitor, model.parameters(), step + 1, [&] { save(step + 1, smoothed); });
    if (monitor.diverged() || stop_requested) break;
  }
  if (mp.data_parallel())
    print_rank_times("video train", world, step_seconds, mp.data_parallel()->times());
  if (const int status = end_of_loop("video train", monitor, bar, checkpoint)) return status;
  char final_metrics[64];
  std::snprintf(final_metrics, sizeof final_metrics, "loss %.4f", smoothed);
  bar.finish(final_metrics);

  std::printf("wrote %s and %s\n", checkpoint.c_str(), model_path.c_str());
  print_peak_memory("video train");
  return 0;
}

}  // namespace

int run_video_train(Args args) {
  return run_on_ranks("video train", args,
                      [&](const Communicator& world) { return video_train(args, world); });
}

}  // namespace mixprec::app
