// `mixprec train gpt`: trains a GPT on a text corpus (the shipped Shakespeare by default) in
// mixed precision, with a progress bar (loss, tokens/s, ETA), periodic validation, atomic
// checkpoints, exact resume and a text sample at the end.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "distributed.h"
#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/error.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/models/byte_tokenizer.h"
#include "mixprec/models/gpt_checkpoint.h"
#include "mixprec/models/gpt_generate.h"
#include "mixprec/models/gpt_train.h"
#include "progress.h"
#include "run_guard.h"

namespace mixprec::app {
namespace {

int train_gpt(Args args, const Communicator& world) {
  const std::string command = "train gpt";
  std::string corpus = source_path("data/shakespeare.txt");
  models::GPTTrainSettings train;  // the trainer's flags, with their defaults
  RunDirOptions run{.out = "runs/gpt", .checkpoint_every = 200};
  std::string prompt = "ROMEO:", log_losses, log_eval;
  int64_t context = 256, layers = 6, d_model = 384, heads = 6;
  int64_t eval_every = 200, eval_batches = 8, sample_tokens = 200;
  double bucket_mb = 4.0;
  bool no_overlap = false;
  ArgParser p(command,
              "Train a GPT-2 style byte-level language model on a text corpus in mixed precision\n"
              "(AdamW, warm-up + cosine learning rate, gradient clipping).");
  p.option("--corpus", &corpus, "text file (bytes are the tokens)");
  p.option("--precision", &train.precision,
           "auto | fp32 | bf16 | fp16 | bf16-params | fp16-params | plan:FILE (per layer, from "
           "`mixprec precision plan`)");
  p.option("--steps", &train.steps, "optimizer steps in all (a resumed run continues to this)");
  p.option("--batch", &train.batch, "sequences per micro-batch (per step without --grad-accum)");
  p.option("--grad-accum", &train.grad_accum,
           "micro-batches per optimizer step: a step on N x --batch sequences in the memory "
           "of --batch");
  p.flag("--checkpoint-activations", &train.checkpoint_activations,
         "keep only each transformer block's input and recompute the rest in backward (less "
         "memory, about a third more compute; the same losses)");
  p.flag("--graph", &train.graph,
         "replay each micro-batch's forward and backward from a graph captured at the first "
         "step: activations and gradients planned in one arena, no allocation per step (the "
         "same losses; alone only, not under mpirun)");
  add_mixed_precision_options(p, train.rounding, train.fallback_after, train.loss_scale,
                              log_losses);
  p.option("--context", &context, "sequence length");
  p.option("--layers", &layers, "transformer blocks");
  p.option("--d-model", &d_model, "model width");
  p.option("--heads", &heads, "attention heads");
  p.option("--lr", &train.lr, "peak learning rate");
  p.option("--warmup", &train.warmup, "warm-up steps");
  p.option("--weight-decay", &train.weight_decay, "AdamW weight decay");
  p.option("--clip", &train.clip, "gradient-norm clipping threshold (0: off)");
  p.option("--seed", &train.seed, "seed of the weights and the batch stream");
  p.option("--eval-every", &eval_every, "steps between validation losses (0: only at the end)");
  p.option("--eval-batches", &eval_batches, "validation batches per evaluation");
  add_run_dir_options(p, run, "directory for checkpoint.safetensors");
  p.option("--prompt", &prompt, "prompt of the sample printed at the end");
  p.option("--sample-tokens", &sample_tokens, "tokens to sample at the end (0: none)");
  p.option("--log-eval", &log_eval,
           "write each validation loss to this file (\"step loss\" per line; resumed as "
           "--log-losses)");
  p.option("--bucket-mb", &bucket_mb,
           "under mpirun: megabytes of f32 gradients per all-reduce bucket");
  p.flag("--no-overlap", &no_overlap,
         "under mpirun: all-reduce the gradients after backward instead of behind it");
  p.epilog(
      "A run stops on Ctrl-C or SIGTERM after saving a checkpoint (a second signal aborts), and\n"
      "stops without saving when it diverges (exit 1). Exit status: 0 done, 1 failed or\n"
      "diverged, 2 usage mistake, 128+N stopped by signal N (continue with --resume).\n\n"
      "Data parallel: 'mpirun -np N mixprec train gpt ...' trains on N ranks, each on --batch\n"
      "sequences of a global batch of N x --batch (the same data as one process with that\n"
      "batch); gradients are averaged in f32, rank 0 prints and writes the checkpoint, which\n"
      "resumes on any number of ranks with the same global batch (docs/DISTRIBUTED.md).");
  if (!p.parse(args)) return 0;
  if (eval_batches < 1 || eval_every < 0 || sample_tokens < 0)
    throw UsageError{
        "train gpt: --eval-batches must be >= 1, --eval-every and --sample-tokens >= 0"};
  check_run_dir_options("train gpt", run);
  check_mixed_precision_options(command, train.rounding, train.fallback_after, train.loss_scale);
  if (!(bucket_mb > 0) || !std::isfinite(bucket_mb))
    throw UsageError{"train gpt: --bucket-mb must be a positive number"};
  if (sample_tokens > 0 && prompt.empty())
    throw UsageError{"train gpt: --prompt must not be empty (or pass --sample-tokens 0)"};

  // Everything that can be checked is checked before step 1, and before OUT is touched.
  if (train.precision == "auto") {  // every rank trains in rank 0's measured choice
    train.precision = amp::PrecisionConfig::for_compute(amp::agreed_auto_precision(world)).name();
    if (world.is_root())
      std::fprintf(stderr, "train gpt: --precision auto -> %s\n",
                   amp::auto_precision().summary().c_str());
  }
  models::GPTTrainOptions options = parse_usage(command, [&] { return train.options(); });
  options.world = &world;
  options.data_parallel = {.bucket_mb = bucket_mb, .overlap = !no_overlap};
  const amp::PrecisionConfig& pc = options.precision;
  const models::TextDataset data = models::TextDataset::from_file(corpus);
  for (const models::Split split : {models::Split::Train, models::Split::Validation})
    if (data.size(split) < context + 1)
      throw UsageError{"train gpt: the " +
                       std::string(split == models::Split::Train ? "training" : "validation") +
                       " split of " + corpus + " has " + std::to_string(data.size(split)) +
                       " tokens, fewer than one --context window of " +
                       std::to_string(context + 1)};
  const models::GPTConfig config{
      .vocab = 256, .context = context, .layers = layers, .d_model = d_model, .heads = heads};
  Generator init(static_cast<uint64_t>(train.seed));
  models::GPT model(config, init);
  nn::broadcast_parameters(world, model.parameters());  // every rank starts from rank 0's weights
  models::GPTTrainer trainer(model, data, options);
  // Under mpirun --batch is each rank's share: a run is its global batch, whatever the ranks.
  const int64_t global_batch = train.batch * world.size();
  // What a resumed run must share with its checkpoint to continue bit for bit.
  const RunSettings settings = {{"precision", pc.name()},
                                {"seed", std::to_string(train.seed)},
                                {"batch", std::to_string(global_batch)},
                                {"context", std::to_string(context)},
                                {"layers", std::to_string(layers)},
                                {"d-model", std::to_string(d_model)},
                                {models::kGPTHeadsKey, std::to_string(heads)},  // for load_gpt
                                {"lr", exact_text(train.lr)},
                                {"warmup", std::to_string(train.warmup)},
                                {"weight-decay", exact_text(train.weight_decay)},
                                {"clip", exact_text(train.clip)},
                                {"corpus", corpus},
                                {"grad-accum", std::to_string(train.grad_accum)},
                                {"rounding", train.rounding},
                                {"fallback-after", std::to_string(train.fallback_after)}};
  // --checkpoint-activations and --graph are not among them: the recomputed activations and the
  // replayed steps are the same bits (tested), so they may change between a run and its
  // resume. --loss-scale neither: a resumed
  // run continues with the checkpoint's scale.
  // Rank 0 prepares OUT and writes every checkpoint; the others only read it on --resume.
  const std::string checkpoint = world.is_root()
                                     ? prepare_run_directory(command, run.out, run.resume,
                                                             run.overwrite)
                                     : run.out + "/checkpoint.safetensors";
  ResumePoint start;
  if (run.resume) {
    start = check_resume(command, checkpoint, settings, run.override, train.steps);
    if (start.finished) return 0;
    // Before loading: it may change parameter dtypes.
    resume_fallback(command, checkpoint, trainer.mixed_precision());
    io::load_checkpoint(checkpoint, model, trainer.optimizer(), &trainer.scaler());
    if (!nn::replicas_agree(world, model.parameters()))
      throw Error(command + ": the ranks loaded different weights from " + checkpoint +
                  ": every rank must see the same file (a shared file system)");
  }
  std::fprintf(stderr,
               "train gpt: %s, %lld parameters, precision %s, corpus %s (%lld train / %lld "
               "validation tokens), batch %lld x %lld tokens%s%s%s%s\n",
               model.summary().c_str(), static_cast<long long>(model.num_parameters()),
               trainer.precision().name().c_str(), corpus.c_str(),
               static_cast<long long>(data.size(models::Split::Train)),
               static_cast<long long>(data.size(models::Split::Validation)),
               static_cast<long long>(global_batch), static_cast<long long>(context),
               train.grad_accum > 1
                   ? (" x " + std::to_string(train.grad_accum) + " micro-batches per step").c_str()
                   : "",
               (std::string(train.checkpoint_activations ? ", activation checkpointing" : "") +
                (train.graph ? ", graph replay" : ""))
                   .c_str(),
               train.rounding == "stochastic" ? ", stochastic rounding" : "",
               world.distributed()
                   ? (", data parallel on " + std::to_string(world.size()) + " ranks of " +
                      std::to_string(train.batch) + " sequences (" +
                      std::to_string(trainer.data_parallel()->num_buckets()) +
                      " all-reduce buckets" + (no_overlap ? ", after backward)" : ")"))
                         .c_str()
                   : "");
  print_lr_schedule(command, train.lr, train.warmup, train.steps);

  LossMonitor monitor(0.95, start);
  auto save = [&](int64_t step) {
    check_replicas(command, world, model.parameters(), step);
    if (!world.is_root()) return;  // rank 0 writes for every rank
    io::SafetensorsMetadata meta;
    add_settings(meta, settings);
    add_progress(meta, step, monitor.smoothed());
    add_fallback(meta, trainer.mixed_precision());
    io::save_checkpoint(checkpoint, model, trainer.optimizer(), &trainer.scaler(), meta);
  };

  const StopOnSignal stop;
  ProgressBar bar(command, train.steps);
  const double tokens_per_step = static_cast<double>(global_batch * train.grad_accum * context);
  double validation = 0, step_seconds = 0;
  StepLog loss_log(command, "--log-losses", world.is_root() ? log_losses : "", start);
  StepLog eval_log(command, "--log-eval", world.is_root() ? log_eval : "", start);
  const auto start_time = std::chrono::steady_clock::now();
  for (int64_t step = start.step; step < train.steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    const double loss = trainer.step(step);
    const double seconds_of_step =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    step_seconds += seconds_of_step;
    char line[80];
    std::snprintf(line, sizeof line, "%.9g %d %.6f", loss, trainer.last_step_skipped() ? 1 : 0,
                  seconds_of_step);
    loss_log.write(step + 1, line);
    // A signal may reach the ranks at different steps: they stop together at the first one.
    const bool stop_requested = world.any(StopOnSignal::requested());
    if (!monitor.observe(step, loss, trainer.last_step_skipped())) break;
    if (trainer.fell_back_at_last_step()) {
      bar.note(std::string(command) + ": step " + std::to_string(step + 1) + ": " +
               trainer.fallback_reason() + ": falling back from " + pc.name() + " to " +
               trainer.precision().name() +
               " (kept in the checkpoint; no checkpoint for the next " +
               std::to_string(kCleanStepsBeforeSaving) + " steps)");
      monitor.precision_changed(kCleanStepsBeforeSaving);
    }
    const bool last = step + 1 == train.steps;
    if ((eval_every > 0 && (step + 1) % eval_every == 0) || last) {
      validation = trainer.evaluate(eval_batches);
      std::snprintf(line, sizeof line, "%.9g", validation);
      eval_log.write(step + 1, line);
    }
    if (monitor.save_now((step + 1) % run.checkpoint_every == 0, last || stop_requested))
      save_checked(monitor, model.parameters(), step + 1, [&] { save(step + 1); });
    if (monitor.diverged()) break;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
    char metrics[128];
    std::snprintf(metrics, sizeof metrics, "loss %.4f | val %.4f | %.0f tok/s%s",
                  monitor.smoothed(), validation,
                  tokens_per_step * static_cast<double>(step + 1 - start.step) / seconds,
                  trainer.last_step_skipped() ? " | skipped (overflow)" : "");
    bar.update(step + 1, metrics);
    if (stop_requested) break;
  }
  if (world.distributed())
    print_rank_times(command, world, step_seconds, trainer.data_parallel()->times());
  if (const int status = end_of_loop(command, monitor, bar, checkpoint)) return status;
  char final_metrics[64];
  std::snprintf(final_metrics, sizeof final_metrics, "loss %.4f | val %.4f", monitor.smoothed(),
                validation);
  bar.finish(final_metrics);
  std::printf("final train loss %.4f, validation loss %.4f; checkpoint %s\n", monitor.smoothed(),
              validation, checkpoint.c_str());
  print_peak_memory(command);
  if (sample_tokens > 0 && world.is_root()) {
    Generator gen(static_cast<uint64_t>(train.seed) + 1);
    const std::vector<int64_t> text =
        models::generate(model, models::ByteTokenizer::encode(prompt), sample_tokens, 0.8, 40, gen);
    std::printf("--- sample (temperature 0.8, top-k 40) ---\n%s\n",
                models::ByteTokenizer::decode(text).c_str());
  }
  return 0;
}

}  // namespace

int run_train_gpt(Args args) {
  return run_on_ranks("train gpt", args,
                      [&](const Communicator& world) { return train_gpt(args, world); });
}

int run_train(Args args) {
  const std::string_view sub = args.empty() ? "--help" : args[0];
  if (sub == "gpt") return run_train_gpt(args.subspan(1));
  if (sub == "--help" || sub == "-h") {
    std::printf(
        "Usage: mixprec train <model> [options]\n\n"
        "Models:\n"
        "  gpt     a GPT-2 style language model on a text corpus (mixed precision)\n\n"
        "Video models train with 'mixprec video train'. Run 'mixprec train gpt --help'.\n");
    return 0;
  }
  throw UsageError{"train: unknown model '" + std::string(sub) + "' (gpt)"};
}

}  // namespace mixprec::app
