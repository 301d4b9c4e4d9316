#pragma once
// What the training commands (`train gpt`, `video train`) share so that a run is never lost
// and never silently wrong:
//   - prepare_run_directory: a fresh run refuses to overwrite a directory that holds a run
//     (unless --overwrite); --resume needs its checkpoint and creates nothing; OUT must be
//     writable; all checked before step 1;
//   - check_resume: --resume refuses settings that differ from the checkpoint's (seed, batch,
//     precision, ...) unless --override, since they break the bit-identical resume; it returns
//     the step and the smoothed loss saved in the checkpoint (so the printed loss is the same
//     after a resume), and whether the run is already at its final step;
//   - LossMonitor: the smoothed loss, and divergence (a non-finite loss, too many skipped steps
//     in a row, a loss explosion), so a diverged run stops before it saves;
//   - StopOnSignal: the first SIGINT/SIGTERM asks the loop to save a final checkpoint and stop,
//     a second one ends the process at once (temporaries removed);
//   - StepLog: per-step logs that a resumed run continues instead of truncating;
//   - the mixed-precision options both trainers take, and the fallback kept in the checkpoint.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli_args.h"
#include "mixprec/core/tensor.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/models/mixed_precision_optimizer.h"
#include "progress.h"

namespace mixprec::app {

// ---- the run directory --------------------------------------------------------------------

// Checks and prepares OUT for `command` before anything is built or trained; returns the path of
// OUT/checkpoint.safetensors.
//   resume:  the checkpoint must exist (an Error otherwise, and OUT is not created);
//   fresh:   OUT must not hold a run (checkpoint.safetensors or, for video, model.safetensors)
//            unless `overwrite`: a UsageError (exit 2) suggesting --resume or --overwrite;
//   then OUT is created and a probe file is written and removed, so an unwritable OUT fails now
//   rather than at the first save.
std::string prepare_run_directory(const std::string& command, const std::string& out, bool resume,
                                  bool overwrite);

// The options of the run directory, the same in every training command: --out, --checkpoint-every,
// --resume, --overwrite, --override (the defaults of `out` and `checkpoint_every` are the
// command's).
struct RunDirOptions {
  std::string out;
  int64_t checkpoint_every = 0;
  bool resume = false, overwrite = false, override = false;
};
// `out_help` says what OUT holds ("directory for checkpoint.safetensors and ...").
void add_run_dir_options(ArgParser& p, RunDirOptions& o, const std::string& out_help);
// --resume excludes --overwrite and --override needs --resume: a UsageError naming `command`.
void check_run_dir_options(const std::string& command, const RunDirOptions& o);

// ---- settings a resumed run must share -----------------------------------------------------

// A run's settings as (option name without "--", value as text), saved in the checkpoint's
// metadata under the same names.
using RunSettings = std::vector<std::pair<std::string, std::string>>;

// A number as the shortest text that reads back as the same double (1e-3, 0.1, 30).
std::string exact_text(double value);

// Adds the settings to checkpoint metadata.
void add_settings(io::SafetensorsMetadata& metadata, const RunSettings& settings);

// ---- where a resumed run starts --------------------------------------------------------------

struct ResumePoint {
  int64_t step = 0;
  std::optional<double> smoothed_loss;  // absent in checkpoints from before it was saved
  bool from_checkpoint = false;         // false: a fresh run, from step 0
  bool finished = false;                // at or past --steps: nothing left to do
};

// On --resume, before any weight is loaded: reads the checkpoint's metadata and checks that every
// setting it also records is equal, else a UsageError that lists each difference ("--seed 1
// (the checkpoint has 0)") and suggests --override. With `override` the differences are printed
// as a warning and the run continues with the new values. Settings an older checkpoint does not
// record are not compared. Returns where the run resumes: "step" (an integer >= 0, else an Error
// naming the file and the field) and "smoothed_loss". Says "resuming CHECKPOINT at step N"
// (stderr) or, when the checkpoint is at or past `steps`, that the run is complete (stdout,
// `finished`: the command then exits 0 without figures of zero steps).
ResumePoint check_resume(const std::string& command, const std::string& checkpoint,
                         const RunSettings& now, bool override, int64_t steps);

// The metadata a checkpoint saves for the loop: "step" and "smoothed_loss" (no clock time: the
// checkpoint of a resumed run is the same file as an uninterrupted run's).
void add_progress(io::SafetensorsMetadata& metadata, int64_t step, double smoothed_loss);

// A log with a line per step that starts with the step's number (--log-losses, --log-eval). A
// fresh run starts the file empty. A resumed run keeps the lines of the steps up to the one it
// resumes at (a run stopped after its last checkpoint logged steps it takes again) and appends:
// the log of a resumed run is the log of the whole run. No path: writes nothing.
class StepLog {
 public:
  StepLog(const std::string& command, const std::string& option, const std::string& path,
          const ResumePoint& start);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // Writes "STEP TEXT\n" and flushes it (a killed run keeps what it logged).
  void write(int64_t step, const std::string& text);

 private:
  std::FILE* file_ = nullptr;
  std::string where_;  // "command: --option path" for errors
};

// The learning rate of optim::warmup_cosine_lr(lr, step, warmup, steps) at a few steps, so a
// run's schedule is on record before it starts (stderr).
void print_lr_schedule(const std::string& command, double lr, int64_t warmup, int64_t steps);

// ---- mixed precision: shared options, the f16 -> bf16 fallback --------------------------------

// The mixed-precision options every trainer takes, with the same help: --rounding,
// --fallback-after, --loss-scale, --log-losses. check_mixed_precision_options refuses what
// they cannot be (a UsageError naming `command`), before anything runs.
void add_mixed_precision_options(ArgParser& p, std::string& rounding, int64_t& fallback_after,
                                 double& loss_scale, std::string& log_losses);
void check_mixed_precision_options(const std::string& command, const std::string& rounding,
                                   int64_t fallback_after, double loss_scale);

// After a fallback, steps taken with a finite loss before a periodic checkpoint may replace the
// last one written in f16 (LossMonitor::precision_changed).
constexpr int64_t kCleanStepsBeforeSaving = 10;

// Records a fallback in checkpoint metadata ("fallback_precision", the precision the run trains
// in now, and "fallback_reason"); nothing before one. The run's "precision" setting stays the
// one asked for, so the same command line resumes it.
void add_fallback(io::SafetensorsMetadata& metadata, const models::MixedPrecisionOptimizer& opt);

// On --resume, before the weights are loaded: a checkpoint that records a fallback resumes in
// that precision (when the run still asks for the precision that fell back; with --override to
// another one, that one is used).
void resume_fallback(const std::string& command, const std::string& checkpoint,
                     models::MixedPrecisionOptimizer& opt);

// ---- the loss, and divergence ----------------------------------------------------------------

// Follows a run's loss: an exponential moving average for the progress line, and whether the run
// has diverged. Divergence is
//   - a non-finite loss on a step the optimizer took (the weights are then garbage);
//   - kMaxSkippedInARow steps in a row skipped by the loss scaler: by then the scale has been
//     halved from 65536 to below 2^-8, so even unscaled gradients overflow: the run cannot recover;
//   - a smoothed loss above kExplosionFactor times the lowest it has been.
// Non-finite losses are never folded into the average; the finite loss of a skipped step is.
class LossMonitor {
 public:
  static constexpr int64_t kMaxSkippedInARow = 25;
  static constexpr double kExplosionFactor = 10.0;

  // `decay`: weight of the history in the average (0.95: about the last 20 steps).
  // `start`: where the run starts (a resumed run continues its saved average).
  LossMonitor(double decay, const ResumePoint& start);

  // After each step. Returns false once the run has diverged (then why() says how).
  bool observe(int64_t step, double loss, bool skipped);
  // Whether the loop should write a checkpoint after this step. `periodic`: one is due by
  // --checkpoint-every; `ending`: the last step or a stop request (always saved unless diverged).
  // A periodic checkpoint waits while the loss scaler skips steps: the step that led there may
  // have made the weights overflow, so the previous checkpoint is kept until a step succeeds.
  bool save_now(bool periodic, bool ending);
  // Declares divergence found another way (weights no longer finite).
  void fail(int64_t step, std::string why);
  // After the trainer changed precision because steps kept overflowing (the f16 -> bf16
  // fallback): the skipped steps before it no longer count towards divergence, and periodic
  // checkpoints wait until `steps` steps in the new precision were taken with a finite loss, so
  // a run that diverges soon after the fallback has not replaced the last good checkpoint.
  void precision_changed(int64_t steps);

  void saved(int64_t step) { last_saved_ = step; }
  int64_t last_saved() const { return last_saved_; }  // -1: no checkpoint yet

  bool diverged() const { return !why_.empty(); }
  const std::string& why() const { return why_; }
  int64_t diverged_at() const { return diverged_at_; }
  double smoothed() const { return smoothed_.value_or(0.0); }

 private:
  double decay_;
  std::optional<double> smoothed_, lowest_;
  int64_t skipped_in_a_row_ = 0, diverged_at_ = -1, last_saved_ = -1, hold_saves_for_ = 0;
  bool save_pending_ = false;
  std::string why_;
};

// Runs `save` (which writes the checkpoint for `step`) only if every parameter is finite, else
// records the divergence: a checkpoint is never written from weights that are not.
void save_checked(LossMonitor& monitor, const std::vector<Tensor>& parameters, int64_t step,
                  const std::function<void()>& save);

// "peak memory N MiB (tensors)": the allocator's peak of live tensor bytes in this process, as
// PyTorch's max_memory_allocated (stdout; a training command's last figure).
void print_peak_memory(const std::string& command);

// After the training loop: a diverged run prints where and why and which checkpoint was kept
// (exit 1); a run stopped by a signal says where it saved (exit 128 + the signal). Returns 0
// when the loop ran to its end: the caller then prints its results.
int end_of_loop(const std::string& command, const LossMonitor& monitor, ProgressBar& bar,
                const std::string& checkpoint);

// ---- signals ------------------------------------------------------------------------------------

// While alive, SIGINT and SIGTERM do not kill the process: the first one is recorded so the
// training loop saves a final checkpoint and stops (requested()); a second one removes the
// temporary files being written and ends the process at once, as the signal would have. On
// destruction the previous handlers come back.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  static bool requested();
  static int signal_number();  // the first signal received, 0 if none
  // The exit status of a run stopped by a signal: 128 + its number (what a shell reports).
  static int exit_status() { return 128 + signal_number(); }
};

// A folder in the system's temporary directory for one process's scratch files,
// "<tmp>/<prefix><pid>", removed with its contents when this object is destroyed (the command's
// end, or an exception on the way out). Folders of the same prefix whose process no longer
// exists (ended by a signal or kill -9) are removed when the next one is made.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& prefix);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// For every command (main installs it): SIGINT, SIGTERM and SIGHUP remove the temporary files
// being written (io::remove_temporaries_now) before the signal ends the process as usual.
void remove_temporaries_on_signal();

}  // namespace mixprec::app
