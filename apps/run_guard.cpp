#include "run_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/optim/lr_schedule.h"

namespace mixprec::app {

namespace fs = std::filesystem;

void add_run_dir_options(ArgParser& p, RunDirOptions& o, const std::string& out_help) {
  p.option("--out", &o.out, out_help);
  p.option("--checkpoint-every", &o.checkpoint_every, "steps between checkpoints", {.min = 1});
  p.flag("--resume", &o.resume, "continue from OUT/checkpoint.safetensors (bit-identical)");
  p.flag("--overwrite", &o.overwrite, "start a new run in an OUT that already holds one");
  p.flag("--override", &o.override,
         "with --resume: accept settings that differ from the checkpoint's (no longer "
         "bit-identical)");
}

void check_run_dir_options(const std::string& command, const RunDirOptions& o) {
  if ((o.resume && o.overwrite) || (o.override && !o.resume))
    throw UsageError{command + ": --resume excludes --overwrite; --override needs --resume"};
}

std::string prepare_run_directory(const std::string& command, const std::string& out, bool resume,
                                  bool overwrite) {
  const std::string checkpoint = out + "/checkpoint.safetensors";
  if (fs::exists(out) && !fs::is_directory(out))
    throw UsageError{command + ": --out " + out + " is not a directory"};
  if (resume) {
    // Checked before OUT is created: a failed --resume leaves nothing behind.
    if (!fs::exists(checkpoint))
      throw Error(command + ": --resume: " + checkpoint +
                  " does not exist (train without --resume to start a run there)");
  } else if (!overwrite) {
    for (const char* name : {"checkpoint.safetensors", "model.safetensors"})
      if (fs::exists(out + "/" + name))
        throw UsageError{command + ": " + out + " already holds a run (" + name +
                         "): pass --resume to continue it, or --overwrite to start over, or " +
                         "choose another --out"};
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw Error(command + ": cannot create --out " + out + ": " + ec.message());
  // A probe written and removed the way checkpoints are: an unwritable OUT fails now, not at
  // the first save after minutes of training.
  io::AtomicFile probe(checkpoint, command);
  probe.discard();
  return checkpoint;
}

std::string exact_text(double value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(value);
}

void add_settings(io::SafetensorsMetadata& metadata, const RunSettings& settings) {
  for (const auto& [name, value] : settings) metadata[name] = value;
}

namespace {

// "--seed 1 (the checkpoint has 0), ..." for every setting that differs; "" if none does.
std::string settings_that_differ(const io::SafetensorsMetadata& saved, const RunSettings& now) {
  std::string differences;
  for (const auto& [name, value] : now) {
    const auto it = saved.find(name);
    if (it == saved.end() || it->second == value) continue;
    differences += (differences.empty() ? "" : ", ") + ("--" + name) + " " + value +
                   " (the checkpoint has " + it->second + ")";
  }
  return differences;
}

// A finite number the checkpoint's metadata may hold under `key`.
std::optional<double> saved_number(const io::SafetensorsMetadata& saved, const std::string& key,
                                   const std::string& checkpoint) {
  const auto it = saved.find(key);
  if (it == saved.end()) return std::nullopt;
  const std::string& text = it->second;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    throw Error(checkpoint + ": metadata '" + key + "' is '" + text +
                "', expected a finite number");
  return value;
}

}  // namespace

ResumePoint check_resume(const std::string& command, const std::string& checkpoint,
                         const RunSettings& now, bool override, int64_t steps) {
  const io::SafetensorsMetadata saved = io::SafetensorsFile::open(checkpoint).metadata();
  const std::string differences = settings_that_differ(saved, now);
  if (!differences.empty() && !override)
    throw UsageError{command + ": --resume with settings that differ from " + checkpoint + ": " +
                     differences +
                     "; a resumed run is bit-identical only with the same settings: drop them, "
                     "or pass --override to continue with the new ones"};
  if (!differences.empty())
    std::fprintf(stderr, "%s: warning: --override: continuing with %s\n", command.c_str(),
                 differences.c_str());
  const int64_t step = metadata_integer(saved, "step", checkpoint, 0);
  const ResumePoint point{.step = step,
                          .smoothed_loss = saved_number(saved, "smoothed_loss", checkpoint),
                          .from_checkpoint = true,
                          .finished = step >= steps};
  if (point.finished)
    std::printf(
        "%s: %s is already at step %lld of --steps %lld: the run is complete, nothing to "
        "do (raise --steps to train further)\n",
        command.c_str(), checkpoint.c_str(), static_cast<long long>(point.step),
        static_cast<long long>(steps));
  else
    std::fprintf(stderr, "resuming %s at step %lld\n", checkpoint.c_str(),
                 static_cast<long long>(point.step));
  return point;
}

void add_progress(io::SafetensorsMetadata& metadata, int64_t step, double smoothed_loss) {
  metadata["step"] = std::to_string(step);
  metadata["smoothed_loss"] = exact_text(smoothed_loss);
}

StepLog::StepLog(const std::string& command, const std::string& option, const std::string& path,
                 const ResumePoint& start)
    : where_(command + ": " + option + " " + path) {
  if (path.empty()) return;
  bool append = false;
  if (std::ifstream old{path}; old && start.from_checkpoint) {
    std::string kept;  // replaced atomically: a kill here loses no line of the run before
    for (std::string line; std::getline(old, line);) {
      int64_t step = 0;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), step);
      if (ec == std::errc() && step <= start.step) kept += line + '\n';
    }
    io::AtomicFile rewritten(path, command);
    rewritten.write(kept.data(), kept.size());
    rewritten.commit();
    append = true;
  }
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) throw Error(where_ + ": cannot write: " + std::strerror(errno));
}

StepLog::~StepLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void StepLog::write(int64_t step, const std::string& text) {
  if (file_ == nullptr) return;
  if (std::fprintf(file_, "%lld %s\n", static_cast<long long>(step), text.c_str()) < 0 ||
      std::fflush(file_) != 0)
    throw Error(where_ + ": cannot write: " + std::strerror(errno));
}

void print_lr_schedule(const std::string& command, double lr, int64_t warmup, int64_t steps) {
  std::vector<int64_t> at = {0,
                             warmup - 1,
                             warmup + (steps - warmup) / 4,
                             warmup + (steps - warmup) / 2,
                             warmup + 3 * (steps - warmup) / 4,
                             steps - 1};  // 0-based steps
  std::erase_if(at, [&](int64_t s) { return s < 0 || s >= steps; });
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  auto lr_at = [&](int64_t step) { return optim::warmup_cosine_lr(lr, step, warmup, steps); };
  std::string points;
  for (const int64_t s : at) {
    char point[64];
    std::snprintf(point, sizeof point, "%s%lld %.3g", points.empty() ? "" : ", ",
                  static_cast<long long>(s + 1), lr_at(s));
    points += point;
  }
  std::fprintf(stderr,
               "%s: learning rate: linear warm-up to %.3g over %lld steps, then cosine decay to "
               "%.3g at step %lld; at step %s\n",
               command.c_str(), lr, static_cast<long long>(warmup), lr_at(steps),
               static_cast<long long>(steps), points.c_str());
}

namespace {
constexpr const char* kFallbackPrecision = "fallback_precision";
constexpr const char* kFallbackReason = "fallback_reason";
}  // namespace

void add_mixed_precision_options(ArgParser& p, std::string& rounding, int64_t& fallback_after,
                                 double& loss_scale, std::string& log_losses) {
  p.option("--rounding", &rounding,
           "nearest | stochastic: how the f32 master weights round into 16-bit parameters "
           "(bf16-params, fp16-params)");
  p.option("--fallback-after", &fallback_after,
           "fp16, fp16-params: switch to bf16 after this many steps in a row skipped for "
           "overflow, or when the loss scale is at its floor (0: never)");
  p.option("--loss-scale", &loss_scale, "initial loss scale of fp16 training (dynamic)");
  p.option("--log-losses", &log_losses,
           "write each step's loss to this file (\"step loss skipped seconds\" per line, 9 "
           "digits, the step's seconds; a resumed run keeps the lines up to its checkpoint and "
           "appends, so the file is the whole run's)");
}

void check_mixed_precision_options(const std::string& command, const std::string& rounding,
                                   int64_t fallback_after, double loss_scale) {
  if (rounding != "nearest" && rounding != "stochastic")
    throw UsageError{command + ": --rounding must be nearest or stochastic, got '" + rounding +
                     "'"};
  if (fallback_after < 0 || fallback_after >= LossMonitor::kMaxSkippedInARow)
    throw UsageError{command + ": --fallback-after must be below " +
                     std::to_string(LossMonitor::kMaxSkippedInARow) +
                     " (that many skipped steps in a row is divergence) and >= 0"};
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    throw UsageError{command + ": --loss-scale must be a positive finite number"};
}

void add_fallback(io::SafetensorsMetadata& metadata, const models::MixedPrecisionOptimizer& opt) {
  if (opt.fallback_reason().empty()) return;
  metadata[kFallbackPrecision] = opt.precision().name();
  metadata[kFallbackReason] = opt.fallback_reason();
}

void resume_fallback(const std::string& command, const std::string& checkpoint,
                     models::MixedPrecisionOptimizer& opt) {
  const io::SafetensorsMetadata saved = io::SafetensorsFile::open(checkpoint).metadata();
  const auto it = saved.find(kFallbackPrecision);
  if (it == saved.end()) return;
  const std::string now = opt.precision().name();
  if (it->second == now) return;  // --override to the fallback itself
  if (!models::trains_in_f16(opt.precision()) ||
      it->second != models::bf16_fallback_of(opt.precision()).name()) {
    std::fprintf(stderr, "%s: %s fell back to %s; --precision %s overrides that\n",
                 command.c_str(), checkpoint.c_str(), it->second.c_str(), now.c_str());
    return;
  }
  const auto reason = saved.find(kFallbackReason);
  const std::string why = reason != saved.end() ? reason->second : "an earlier fallback";
  std::fprintf(stderr, "%s: %s fell back from %s to %s (%s): continuing in %s\n",
               command.c_str(), checkpoint.c_str(), now.c_str(), it->second.c_str(), why.c_str(),
               it->second.c_str());
  opt.fall_back(why);
}

void print_peak_memory(const std::string& command) {
  const double mib =
      static_cast<double>(CachingAllocator::global().stats().peak_allocated_bytes) / (1 << 20);
  std::printf("%s: peak memory %.1f MiB (tensors)\n", command.c_str(), mib);
}

LossMonitor::LossMonitor(double decay, const ResumePoint& start)
    : decay_(decay),
      smoothed_(start.smoothed_loss),
      lowest_(start.smoothed_loss),
      last_saved_(start.from_checkpoint ? start.step : -1) {}

bool LossMonitor::observe(int64_t step, double loss, bool skipped) {
  if (diverged()) return false;
  if (skipped) {
    if (++skipped_in_a_row_ >= kMaxSkippedInARow)
      fail(step, "the loss scaler skipped " + std::to_string(skipped_in_a_row_) +
                     " steps in a row (the forward or the gradients overflow whatever the scale)");
  } else {
    skipped_in_a_row_ = 0;
    if (hold_saves_for_ > 0 && std::isfinite(loss)) --hold_saves_for_;
    // The optimizer took this step: with a non-finite loss its update is garbage.
    if (!std::isfinite(loss)) fail(step, "the loss is " + exact_text(loss));
  }
  if (diverged() || !std::isfinite(loss)) return !diverged();
  smoothed_ = smoothed_ ? decay_ * *smoothed_ + (1.0 - decay_) * loss : loss;
  lowest_ = lowest_ ? std::min(*lowest_, *smoothed_) : *smoothed_;
  // A loss that has been exactly 0 has no scale to explode against.
  if (*lowest_ > 0 && *smoothed_ > kExplosionFactor * *lowest_)
    fail(step, "the smoothed loss exploded to " + exact_text(*smoothed_) + ", more than " +
                   exact_text(kExplosionFactor) + "x its lowest " + exact_text(*lowest_));
  return !diverged();
}

bool LossMonitor::save_now(bool periodic, bool ending) {
  if (diverged()) return false;
  save_pending_ = save_pending_ || periodic;
  if (!ending && (!save_pending_ || skipped_in_a_row_ > 0 || hold_saves_for_ > 0)) return false;
  save_pending_ = false;
  return true;
}

void LossMonitor::precision_changed(int64_t steps) {
  skipped_in_a_row_ = 0;
  hold_saves_for_ = steps;
}

void LossMonitor::fail(int64_t step, std::string why) {
  if (diverged()) return;
  why_ = std::move(why);
  diverged_at_ = step;
}

namespace {

bool all_finite(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    const Tensor values = t.detach().to(DType::F64).contiguous();
    const double* v = values.data<double>();
    for (int64_t i = 0; i < values.numel(); ++i)
      if (!std::isfinite(v[i])) return false;
  }
  return true;
}

}  // namespace

void save_checked(LossMonitor& monitor, const std::vector<Tensor>& parameters, int64_t step,
                  const std::function<void()>& save) {
  if (!all_finite(parameters)) {
    monitor.fail(step - 1, "the weights are no longer finite");
    return;
  }
  save();
  monitor.saved(step);
}

int end_of_loop(const std::string& command, const LossMonitor& monitor, ProgressBar& bar,
                const std::string& checkpoint) {
  if (monitor.diverged()) {
    bar.stop("diverged");
    std::fprintf(stderr, "%s: the run diverged at step %lld: %s.\n", command.c_str(),
                 static_cast<long long>(monitor.diverged_at() + 1), monitor.why().c_str());
    if (monitor.last_saved() >= 0)
      std::fprintf(stderr,
                   "%s: nothing was saved after it: %s still holds the last good state (step "
                   "%lld). Resume it with a lower --lr or a wider --precision (bf16, fp32) and "
                   "--override.\n",
                   command.c_str(), checkpoint.c_str(),
                   static_cast<long long>(monitor.last_saved()));
    else
      std::fprintf(stderr,
                   "%s: no checkpoint was written. Try a lower --lr or a wider --precision "
                   "(bf16, fp32).\n",
                   command.c_str());
    return 1;
  }
  if (StopOnSignal::requested()) {
    bar.stop("stopped");
    std::fprintf(stderr,
                 "%s: stopped by signal %d after step %lld, saved in %s: continue with "
                 "--resume\n",
                 command.c_str(), StopOnSignal::signal_number(),
                 static_cast<long long>(monitor.last_saved()), checkpoint.c_str());
    return StopOnSignal::exit_status();
  }
  return 0;
}

// ---- signals ----

namespace {

std::atomic<int> g_stop_signal{0};
struct sigaction g_previous_int, g_previous_term;

// Ends the process as `sig` would have, after removing this process's temporaries.
void die_of(int sig) {
  io::remove_temporaries_now();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_stop_signal.compare_exchange_strong(expected, sig)) die_of(sig);  // the second one
}

void on_fatal_signal(int sig) { die_of(sig); }

void install(int sig, void (*handler)(int), struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write interrupted by the first signal carries on
  sigaction(sig, &action, previous);
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_stop_signal = 0;
  install(SIGINT, on_stop_signal, &g_previous_int);
  install(SIGTERM, on_stop_signal, &g_previous_term);
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool StopOnSignal::requested() { return g_stop_signal.load() != 0; }
int StopOnSignal::signal_number() { return g_stop_signal.load(); }

ScratchFolder::ScratchFolder(const std::string& prefix) {
  const fs::path tmp = fs::temp_directory_path();
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(tmp, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::optional<int64_t> pid = parse_integer(std::string_view(name).substr(prefix.size()));
    if (pid && *pid > 0 && *pid != ::getpid() && ::kill(static_cast<pid_t>(*pid), 0) != 0 &&
        errno == ESRCH)
      fs::remove_all(e.path(), ec);  // a dead process's: nobody else will remove it
  }
  path_ = (tmp / (prefix + std::to_string(::getpid()))).string();
  fs::create_directories(path_);
}

ScratchFolder::~ScratchFolder() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void remove_temporaries_on_signal() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) install(sig, on_fatal_signal, nullptr);
}

}  // namespace mixprec::app
