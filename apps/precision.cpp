// `mixprec precision plan`: a per-layer precision plan measured on a model and its data.
#include <cstdio>
#include <memory>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/amp/precision_plan.h"
#include "mixprec/core/error.h"
#include "mixprec/models/gpt_checkpoint.h"
#include "mixprec/models/gpt_precision_plan.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_precision_plan.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

std::string number_or_dash(double v, const char* format) {
  if (!(v == v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// GPT plans record each block's share of the forward time; video plans what storing the
// module in bf16 saved of a frame's time.
void print_report(const amp::PrecisionPlan& plan, const char* output) {
  const bool video = plan.model == "video";
  std::printf("%-24s %-6s %12s %12s %12s %12s %11s\n", "layer", "dtype", "error bf16",
              "error f16", "grad bf16", "grad f16", video ? "bf16 saves" : "time share");
  double share = 0;
  for (const amp::PlanLayer& l : plan.layers) {
    const std::string chosen(dtype_name(l.dtype));
    std::printf("%-24s %-6s %12s %12s %12s %12s %11s\n", l.name.c_str(), chosen.c_str(),
                number_or_dash(l.error_bf16, "%.3g").c_str(),
                number_or_dash(l.error_f16, "%.3g").c_str(),
                number_or_dash(l.grad_error_bf16, "%.3g").c_str(),
                number_or_dash(l.grad_error_f16, "%.3g").c_str(),
                number_or_dash(100 * (video ? l.time_saved_bf16 : l.time_share), "%.1f%%").c_str());
    share += l.time_share;
  }
  if (!video)
    std::printf("%-24s %-6s %12s %12s %12s %12s %11s\n", "(rest)", "f32", "", "", "", "",
                number_or_dash(100 * (1 - share), "%.1f%%").c_str());
  std::printf(
      "budget %g (relative RMS error of the %s and of the gradients with only that\n"
      "layer in 16 bits; the larger of the two must be within it)\n",
      plan.budget, output);
}

// `precision plan --model video`: the model file's network on held-out clips of its dataset.
amp::PrecisionPlan plan_video(const std::string& checkpoint, const models::VideoPlanOptions& o) {
  models::VideoModelInfo info;
  const std::unique_ptr<models::UNetVideo> model = models::load_video_model(checkpoint, &info);
  const data::MovingShapes data = models::training_dataset(info, checkpoint);
  std::printf("precision plan: %s (%lld parameters), %lld held-out clips, %s\n",
              checkpoint.c_str(), static_cast<long long>(model->parameter_count()),
              static_cast<long long>(o.clips),
              info.prediction == models::Prediction::Direct
                  ? "direct (1 forward per frame)"
                  : (std::to_string(o.steps) + " DDIM steps per frame").c_str());
  return models::plan_video_precision(*model, info, data, o);
}

int run_precision_plan(Args args) {
  const std::string command = "precision plan";
  std::string model = "gpt", checkpoint, out, corpus = source_path("data/shakespeare.txt");
  double budget = -1;
  int64_t batches = 2, batch = 4, seed = 0, context = 256, layers = 6, d_model = 384, heads = 6,
          clips = 4, steps = 4, repetitions = 5;
  ArgParser p(command,
              "Measures each layer's sensitivity (the error of the output and of the gradients\n"
              "when only that layer stores its parameters in bf16 or f16) on real batches and its\n"
              "share of the forward time, and writes the cheapest dtype per layer whose errors\n"
              "are within the budget.\n"
              "Train or generate with it: --precision plan:FILE.");
  p.option("--model", &model, "gpt | video");
  p.option("--checkpoint", &checkpoint,
           "gpt: a `train gpt` checkpoint to plan (default: fresh weights from --seed and the "
           "size options); video: a `video train` model file (default: the shipped model)");
  p.option("--budget", &budget,
           "largest relative RMS error of the output or the gradients a layer may cause",
           {.min = 0});
  p.option("--out", &out, "the plan's JSON file");
  p.option("--corpus", &corpus, "text file the model trains on (bytes are the tokens)");
  p.option("--batches", &batches, "training batches the error is measured on", {.min = 1});
  p.option("--batch", &batch, "sequences per batch", {.min = 1});
  p.option("--seed", &seed, "seed of the batch stream and of fresh weights", {.min = 0});
  p.option("--context", &context, "sequence length (fresh weights)", {.min = 1});
  p.option("--layers", &layers, "transformer blocks (fresh weights)", {.min = 1});
  p.option("--d-model", &d_model, "model width (fresh weights)", {.min = 1});
  p.option("--heads", &heads, "attention heads (fresh weights)", {.min = 1});
  p.option("--clips", &clips, "video: held-out clips the error is measured on", {.min = 1});
  p.option("--steps", &steps, "video: DDIM steps per frame of a diffusion model", {.min = 1});
  p.option("--repetitions", &repetitions, "timed runs per measurement (the median counts)",
           {.min = 1});
  if (!p.parse(args)) return 0;
  if (model != "gpt" && model != "video")
    throw UsageError{"precision plan: --model must be gpt or video, got '" + model + "'"};
  if (budget < 0) throw UsageError{"precision plan: --budget E is required"};
  if (out.empty()) throw UsageError{"precision plan: --out FILE is required"};
  if (model == "video") {
    const amp::PrecisionPlan plan =
        plan_video(checkpoint.empty() ? default_video_model_path() : checkpoint,
                   {.budget = budget,
                    .clips = clips,
                    .steps = steps,
                    .seed = static_cast<uint64_t>(seed),
                    .repetitions = static_cast<int>(repetitions)});
    amp::write_precision_plan(out, plan);
    print_report(plan, "generated frames");
    std::printf("wrote %s (use: --precision plan:%s)\n", out.c_str(), out.c_str());
    return 0;
  }

  const models::TextDataset data = models::TextDataset::from_file(corpus);
  std::unique_ptr<models::GPT> gpt;
  if (!checkpoint.empty()) {
    gpt = models::load_gpt_f32(checkpoint);  // a -params run's f32 master weights
  } else {
    Generator init(static_cast<uint64_t>(seed));
    gpt = std::make_unique<models::GPT>(
        models::GPTConfig{
            .vocab = 256, .context = context, .layers = layers, .d_model = d_model, .heads = heads},
        init);
  }
  const int64_t window = gpt->config().context + 1;
  if (data.size(models::Split::Train) < window)
    throw UsageError{"precision plan: the training split of " + corpus + " has fewer than " +
                     std::to_string(window) + " tokens"};
  const amp::PrecisionPlan plan = models::plan_gpt_precision(
      *gpt, data,
      {.budget = budget,
       .batches = batches,
       .batch = batch,
       .seed = static_cast<uint64_t>(seed),
       .repetitions = static_cast<int>(repetitions)});
  amp::write_precision_plan(out, plan);
  std::printf("precision plan: %s, %lld batches x %lld sequences of %s\n", gpt->summary().c_str(),
              static_cast<long long>(batches), static_cast<long long>(batch), corpus.c_str());
  print_report(plan, "logits");
  std::printf("wrote %s (use: --precision plan:%s)\n", out.c_str(), out.c_str());
  return 0;
}

constexpr Command kPrecisionCommands[] = {
    {"plan", "measure each layer's error in bf16/f16 and time share; write a per-layer plan",
     run_precision_plan},
};

}  // namespace

int run_precision(Args args) {
  return run_command_group({.name = "precision",
                            .metavar = "command",
                            .intro = "Per-layer precision. `mixprec info` shows what "
                                     "--precision auto picks for the whole model.",
                            .commands = kPrecisionCommands,
                            .footer = "Run 'mixprec precision plan --help' for its options."},
                           args);
}

}  // namespace mixprec::app
