// `mixprec stream train`: trains PeakNet (models/peaknet.h) on synthetic detector panels and
// their true peak masks with the focal loss, in mixed precision (bf16 autocast by default), with
// a progress bar, periodic held-out F1, atomic checkpoints, exact resume, and a model file that
// `stream run --finder net --model FILE` loads.
#include <cmath>
#include <cstdio>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/io/json.h"
#include "mixprec/models/peaknet.h"
#include "mixprec/models/peaknet_train.h"
#include "mixprec/stream/classic_finder.h"
#include "progress.h"
#include "run_guard.h"

namespace mixprec::app {
namespace {

std::vector<int64_t> integer_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text))
    out.push_back(integer_option("stream train", option, item));
  return out;
}

// Held-out frames come from a detector seed training never uses (another bad-pixel map too).
constexpr uint64_t kHeldOutSeedOffset = 1000;

// Chooses the model's peak rule on held-out frames (models::calibrate_peak_rule), prints each
// candidate's F1 (a row per min_pixels) and the choice on stderr, and sets it.
models::PeakRuleScore calibrate(const char* command, models::PeakNet& model,
                                const stream::SyntheticDetector& held_out, int64_t frames,
                                double min_truth_snr) {
  std::vector<models::PeakRuleScore> scores;
  const models::PeakRuleScore best =
      models::calibrate_peak_rule(model, held_out, 0, frames, 1.5, min_truth_snr, &scores);
  std::fprintf(stderr,
               "%s: held-out F1 by peak threshold (0.05 .. 0.70), min pixels and the SNR that "
               "keeps a smaller peak:\n",
               command);
  for (int64_t pixels = 1; pixels <= 4; ++pixels)
    for (const double snr : models::kSmallPeakSnrs) {
      if (pixels == 1 && snr != 0) continue;
      std::fprintf(stderr,
                   "  min pixels %lld, smaller at SNR %-4s:", static_cast<long long>(pixels),
                   snr > 0 ? exact_text(snr).c_str() : "-");
      for (const models::PeakRuleScore& s : scores)
        if (s.min_pixels == pixels && s.small_peak_snr == snr)
          std::fprintf(stderr, " %.4f", s.counts.f1());
      std::fprintf(stderr, "\n");
    }
  model.set_peak_rule(best.threshold, best.min_pixels, best.small_peak_snr);
  std::fprintf(stderr,
               "%s: peak rule threshold %.2f, min pixels %lld, smaller peaks at SNR %s: F1 %.4f "
               "(P %.4f R %.4f)\n",
               command, best.threshold, static_cast<long long>(best.min_pixels),
               best.small_peak_snr > 0 ? exact_text(best.small_peak_snr).c_str() : "- (none)",
               best.counts.f1(), best.counts.precision(), best.counts.recall());
  return best;
}

}  // namespace

int run_stream_train(Args args) {
  std::string precision = "bf16", widths = "16,32,48", depths = "1,1,1";
  RunDirOptions run{.out = "runs/peaknet", .checkpoint_every = 200};
  models::PeakNetTrainOptions o;
  models::PeakNetConfig config;
  int64_t seed = 1, eval_every = 200, eval_frames = 16;
  double eval_snr = 8;
  ArgParser p(
      "stream train",
      "Train PeakNet, the Bragg-peak segmentation network (a ConvNeXt-V2 encoder and a\n"
      "light U-Net decoder, docs/STREAM.md), on crops of synthetic detector panels and their\n"
      "true peak masks, with the focal loss, in mixed precision.");
  add_run_dir_options(p, run, "directory for checkpoint.safetensors and model.safetensors");
  p.option("--steps", &o.steps, "optimizer steps in all (a resumed run continues to this)");
  p.option("--batch", &o.batch, "crops per step");
  p.option("--crop", &o.crop, "crop side in pixels (a multiple of 2^levels)");
  p.option("--crops-per-frame", &o.crops_per_frame, "crops cut from each generated panel");
  p.option("--precision", &precision, "bf16 (autocast, f32 weights) | fp32");
  p.option("--lr", &o.lr, "peak AdamW learning rate (linear warm-up, cosine decay to --min-lr)");
  p.option("--min-lr", &o.min_lr, "learning rate at the end of the cosine");
  p.option("--warmup", &o.warmup, "warm-up steps");
  p.option("--weight-decay", &o.weight_decay, "AdamW weight decay");
  p.option("--alpha", &o.focal.alpha,
           "focal loss: weight of the peak class (1 - alpha for background)");
  p.option("--gamma", &o.focal.gamma, "focal loss: focusing exponent (0: weighted cross-entropy)");
  p.option("--label-snr", &o.labels.min_snr,
           "spots at or above this expected SNR are peaks; weaker ones are don't-care");
  p.option("--label-reach", &o.labels.reach_sigma,
           "a peak's mask: pixels within this many sigma of its centre");
  p.option("--detector", &o.detector,
           "the synthetic detector: single | quad | epix10k2m (panels of 352 x 384)");
  p.option("--widths", &widths, "channels per encoder level, comma-separated");
  p.option("--depths", &depths, "ConvNeXt blocks per encoder level, comma-separated");
  p.option("--stem", &config.stem_channels, "channels of the full-resolution stem");
  p.option("--mlp-ratio", &config.mlp_ratio, "a block's hidden width / its width");
  p.option("--kernel", &config.kernel, "the ConvNeXt blocks' depthwise kernel (odd)");
  p.option("--seed", &seed, "seed of the initial weights and the data", {.min = 0});
  p.option("--eval-every", &eval_every,
           "steps between held-out F1 measurements (0: only at the end)", {.min = 0});
  p.option("--eval-frames", &eval_frames, "held-out frames per measurement", {.min = 1});
  p.option("--eval-snr", &eval_snr,
           "held-out scoring: weaker true spots are neither required nor false", {.min = 0});
  p.epilog(
      "Held-out F1: frames of a detector seed the training never sees (seed + 1000), scored like "
      "`stream run` (match within 1.5 px, true spots with SNR >= --eval-snr), beside the classical "
      "finder's on the same frames. At the end, the peak rule with the best held-out F1 (the peak "
      "probability threshold, 0.05 .. 0.70 where 0.5 is the argmax, and the smallest peak, 1 .. 4 "
      "pixels) is written into the model file, which `stream run` and `bench stream` then use; "
      "`stream calibrate` chooses it again for a trained model.\n"
      "Exit status: 0 trained, 1 diverged or failed write, 2 usage mistake, 128 + N stopped by "
      "signal N (a checkpoint was saved).");
  if (!p.parse(args)) return 0;
  check_run_dir_options("stream train", run);
  if (precision != "bf16" && precision != "fp32")
    throw UsageError{"stream train: --precision must be bf16 or fp32, got '" + precision + "'"};
  o.compute = precision == "bf16" ? DType::BF16 : DType::F32;
  o.seed = static_cast<uint64_t>(seed);
  config.widths = integer_list("--widths", widths);
  config.depths = integer_list("--depths", depths);
  parse_usage("stream train", [&] {
    config.validate();
    o.validate(config);
    return 0;
  });

  const RunSettings settings = {{"precision", precision},
                                {"seed", std::to_string(seed)},
                                {"batch", std::to_string(o.batch)},
                                {"crop", std::to_string(o.crop)},
                                {"crops-per-frame", std::to_string(o.crops_per_frame)},
                                {"detector", o.detector},
                                {"widths", widths},
                                {"depths", depths},
                                {"stem", std::to_string(config.stem_channels)},
                                {"mlp-ratio", std::to_string(config.mlp_ratio)},
                                {"kernel", std::to_string(config.kernel)},
                                {"lr", exact_text(o.lr)},
                                {"min-lr", exact_text(o.min_lr)},
                                {"warmup", std::to_string(o.warmup)},
                                {"weight-decay", exact_text(o.weight_decay)},
                                {"alpha", exact_text(o.focal.alpha)},
                                {"gamma", exact_text(o.focal.gamma)},
                                {"label-snr", exact_text(o.labels.min_snr)},
                                {"label-reach", exact_text(o.labels.reach_sigma)}};
  const std::string checkpoint =
      prepare_run_directory("stream train", run.out, run.resume, run.overwrite);
  Generator init(static_cast<uint64_t>(seed));
  models::PeakNet model(config, init);
  models::PeakNetTrainer trainer(model, o);
  ResumePoint resumed;
  if (run.resume) {
    resumed = check_resume("stream train", checkpoint, settings, run.override, o.steps);
    if (resumed.finished) return 0;
    io::load_checkpoint(checkpoint, model, trainer.optimizer());
    trainer.set_steps_done(resumed.step);
  }
  int64_t parameters = 0;
  for (const Tensor& t : model.parameters()) parameters += t.numel();
  std::fprintf(
      stderr,
      "stream train: PeakNet widths %s, depths %s, stem %lld, kernel %lld (%lld parameters), precision "
      "%s, %.3f GFLOP per 352 x 384 panel, batch %lld crops of %lld px, %lld steps, focal alpha %g "
      "gamma %g, labels SNR >= %g\n",
      widths.c_str(), depths.c_str(), static_cast<long long>(config.stem_channels),
      static_cast<long long>(config.kernel), static_cast<long long>(parameters), precision.c_str(),
      2e-9 * static_cast<double>(model.multiply_adds(352, 384)), static_cast<long long>(o.batch),
      static_cast<long long>(o.crop), static_cast<long long>(o.steps), o.focal.alpha, o.focal.gamma,
      o.labels.min_snr);

  // Held-out frames, and the classical finder's F1 on them (the figure the network must beat).
  const stream::SyntheticDetector held_out(stream::detector_geometry(o.detector), {},
                                           o.seed + kHeldOutSeedOffset);
  stream::MatchCounts classic_score;
  {
    const stream::ClassicPeakFinder classic(held_out.geometry(), held_out.bad_pixel_mask());
    stream::SyntheticFrame frame;
    for (int64_t i = 0; i < eval_frames; ++i) {
      held_out.generate(i, frame);
      const std::vector<float> values(frame.adu.begin(), frame.adu.end());
      classic_score +=
          stream::match_peaks(classic.find(values.data()), frame.peaks, 1.5, eval_snr);
    }
  }
  double last_f1 = std::nan("");
  auto evaluate = [&] {
    const stream::MatchCounts s = models::evaluate_peaknet(model, held_out, 0, eval_frames, 1.5, eval_snr);
    last_f1 = s.f1();
    std::fprintf(stderr,
                 "\nstream train: step %lld held-out F1 %.4f (P %.4f R %.4f), classic %.4f\n",
                 static_cast<long long>(trainer.steps_done()), s.f1(), s.precision(), s.recall(),
                 classic_score.f1());
  };

  const std::string model_path = run.out + "/model.safetensors";
  auto save = [&](int64_t step, double loss) {
    io::SafetensorsMetadata meta = {{"precision", precision}};
    add_settings(meta, settings);
    add_progress(meta, step, loss);
    io::save_checkpoint(checkpoint, model, trainer.optimizer(), nullptr, meta);
    io::SafetensorsMetadata info = {{"train_steps", std::to_string(step)},
                                    {"train_loss", io::json_number(loss)},
                                    {"train_seed", std::to_string(seed)},
                                    {"train_detector", o.detector}};
    if (!std::isnan(last_f1)) info["held_out_f1"] = io::json_number(last_f1);
    models::save_peaknet(model_path, model, info);
  };

  LossMonitor monitor(0.98, resumed);
  const StopOnSignal stop;
  ProgressBar bar("stream train", o.steps);
  double smoothed = monitor.smoothed();
  for (int64_t step = trainer.steps_done(); step < o.steps; ++step) {
    const double loss = trainer.step();
    if (!monitor.observe(step, loss, false)) break;
    smoothed = monitor.smoothed();
    char metrics[96];
    std::snprintf(metrics, sizeof metrics, "loss %.4f | lr %.2e%s", smoothed,
                  trainer.optimizer().lr(),
                  std::isnan(last_f1) ? "" : (" | F1 " + io::json_number(last_f1, 4)).c_str());
    bar.update(step + 1, metrics);
    const bool last = step + 1 == o.steps;
    if ((eval_every > 0 && (step + 1) % eval_every == 0) || last) evaluate();
    // At the end, the peak rule with the best held-out F1 goes into the model file.
    if (last) last_f1 = calibrate("stream train", model, held_out, eval_frames, eval_snr).counts.f1();
    if (monitor.save_now((step + 1) % run.checkpoint_every == 0, last || StopOnSignal::requested()))
      save_checked(monitor, model.parameters(), step + 1, [&] { save(step + 1, smoothed); });
    if (monitor.diverged() || StopOnSignal::requested()) break;
  }
  if (const int status = end_of_loop("stream train", monitor, bar, checkpoint)) return status;
  char final_metrics[64];
  std::snprintf(final_metrics, sizeof final_metrics, "loss %.4f", smoothed);
  bar.finish(final_metrics);
  std::printf(
      "{\"checkpoint\": %s, \"model\": %s, \"steps\": %lld, \"loss\": %s, \"held_out_f1\": %s, "
      "\"threshold\": %s, \"min_pixels\": %lld, \"small_peak_snr\": %s, \"classic_f1\": %s, "
      "\"held_out_frames\": %lld}\n",
      io::json_quote(checkpoint).c_str(), io::json_quote(model_path).c_str(),
      static_cast<long long>(o.steps), io::json_number(smoothed).c_str(),
      io::json_number(last_f1).c_str(), io::json_number(model.config().threshold).c_str(),
      static_cast<long long>(model.config().min_pixels),
      io::json_number(model.config().small_peak_snr).c_str(),
      io::json_number(classic_score.f1()).c_str(), static_cast<long long>(eval_frames));
  return 0;
}

int run_stream_calibrate(Args args) {
  std::string model_path, output, detector;
  // 128 frames: with 224 candidate rules, 32 frames picked rules that did worse on unseen ones.
  int64_t frames = 128, seed = -1;
  double min_truth_snr = 8;
  ArgParser p("stream calibrate",
              "Choose a trained PeakNet's peak rule (the peak probability threshold and the\n"
              "smallest peak in pixels) for the best F1 on held-out synthetic frames, and write\n"
              "it into the model file.");
  p.option("--model", &model_path, "the PeakNet file (stream train's model.safetensors)");
  p.option("--output", &output, "write the calibrated model here (default: --model, replaced atomically)");
  p.option("--frames", &frames, "held-out frames to score", {1, 100000});
  p.option("--min-truth-snr", &min_truth_snr,
           "scoring: weaker true peaks are neither required nor false", {.min = 0});
  p.option("--seed", &seed,
           "held-out detector seed (default: the training seed + 1000, as stream train scores)",
           {.min = -1});
  p.option("--detector", &detector, "the synthetic detector (default: the training's)");
  p.epilog("Exit status: 0 written, 1 unreadable model or failed write, 2 usage mistake.");
  if (!p.parse(args)) return 0;
  if (model_path.empty()) throw UsageError{"stream calibrate: --model FILE is required"};
  if (output.empty()) output = model_path;
  io::SafetensorsMetadata extra;
  const std::unique_ptr<models::PeakNet> model = models::load_peaknet(model_path, &extra);
  if (seed < 0) {
    const auto it = extra.find("train_seed");
    if (it == extra.end())
      throw UsageError{"stream calibrate: " + model_path +
                       " does not say its training seed: give --seed"};
    seed = integer_option("stream calibrate", "train_seed", it->second) +
           static_cast<int64_t>(kHeldOutSeedOffset);
  }
  if (detector.empty()) {
    const auto it = extra.find("train_detector");
    detector = it == extra.end() ? "single" : it->second;
  }
  const stream::SyntheticDetector held_out(stream::detector_geometry(detector), {},
                                           static_cast<uint64_t>(seed));
  model->to(DType::BF16);  // as stream run finds peaks by default: bf16 from the source
  const models::PeakRuleScore best =
      calibrate("stream calibrate", *model, held_out, frames, min_truth_snr);
  model->to(DType::F32);  // the file keeps f32 weights (exact: they were f32 to begin with)
  extra["calibration"] = detector + " seed " + std::to_string(seed) + ", " +
                         std::to_string(frames) + " frames, SNR >= " + exact_text(min_truth_snr);
  extra["held_out_f1"] = io::json_number(best.counts.f1());  // of the rule now in the file
  models::save_peaknet(output, *model, extra);
  std::printf(
      "{\"model\": %s, \"threshold\": %s, \"min_pixels\": %lld, \"small_peak_snr\": %s, "
      "\"f1\": %s, \"precision\": %s, \"recall\": %s, \"frames\": %lld, \"seed\": %lld, "
      "\"min_truth_snr\": %s}\n",
      io::json_quote(output).c_str(), io::json_number(best.threshold).c_str(),
      static_cast<long long>(best.min_pixels), io::json_number(best.small_peak_snr).c_str(),
      io::json_number(best.counts.f1()).c_str(), io::json_number(best.counts.precision()).c_str(),
      io::json_number(best.counts.recall()).c_str(), static_cast<long long>(frames),
      static_cast<long long>(seed), io::json_number(min_truth_snr).c_str());
  return 0;
}

}  // namespace mixprec::app
