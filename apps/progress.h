#pragma once
// A progress bar for long work (training, generation, benchmarks), on stderr:
//   train gpt [########------------]  412/1000  41% | loss 1.8432 | 3.1 it/s | ETA 03:09
// On a terminal it redraws one line at most 10 times a second; when stderr is a file or a pipe
// (CI logs) it prints a plain line every `log_every` updates instead, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mixprec::app {

class ProgressBar {
 public:
  // total <= 0: open-ended work (a socket's stream): the count and rate, without a bar or ETA.
  ProgressBar(std::string label, int64_t total, int64_t log_every = 0);
  // `done` items finished; `metrics` is shown after the counters ("loss 1.84 | ...").
  void update(int64_t done, const std::string& metrics = "");
  void finish(const std::string& metrics = "");  // the final line, with the total time
  // The final line of work that ended early (stopped, diverged), at the last update's count.
  void stop(const std::string& metrics);
  double elapsed_seconds() const;
  // A line of its own between updates (an event worth keeping in the log, say a precision
  // fallback): on a terminal it replaces the bar, which the next update draws again below it.
  void note(const std::string& line);

 private:
  void draw(int64_t done, const std::string& metrics, bool final);
  std::string label_;
  int64_t total_, log_every_;
  bool open_ended_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t start_done_ = -1;  // resumed runs: rate counts from the first update
  int64_t last_done_ = 0;
  int64_t logged_done_ = -1;  // the count of the last line written to a log (not a terminal)
};

// "mm:ss" or "h:mm:ss".
std::string format_duration(double seconds);

}  // namespace mixprec::app
