#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace mixprec::app {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, int64_t log_every)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      log_every_(log_every > 0 ? log_every : total > 0 ? std::max<int64_t>(1, total / 20) : 100),
      open_ended_(total <= 0),
      tty_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::update(int64_t done, const std::string& metrics) {
  if (start_done_ < 0) {
    start_done_ = done > 0 ? done - 1 : 0;
  }
  last_done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && (open_ended_ || done < total_)) return;
  } else if ((done % log_every_ != 0 && (open_ended_ || done != total_)) || done == logged_done_) {
    return;  // a log gets a line per step of progress, not one per call while waiting
  }
  logged_done_ = done;
  last_draw_ = now;
  draw(done, metrics, false);
}

void ProgressBar::note(const std::string& line) {
  std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", line.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish(const std::string& metrics) { draw(total_, metrics, true); }
void ProgressBar::stop(const std::string& metrics) { draw(last_done_, metrics, true); }

void ProgressBar::draw(int64_t done, const std::string& metrics, bool final) {
  const double elapsed = elapsed_seconds();
  const double rate = static_cast<double>(done - std::max<int64_t>(start_done_, 0)) / elapsed;
  const double pct = 100.0 * static_cast<double>(done) / static_cast<double>(total_);
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * std::min(1.0, pct / 100.0));
  const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                          std::string(static_cast<std::size_t>(kWidth - filled), '-');
  const std::string timing =
      final ? "took " + format_duration(elapsed)
            : "ETA " + format_duration(static_cast<double>(total_ - done) / rate);
  char rate_text[32];
  if (open_ended_) {
    // No total (a socket's stream): the count, the rate and the time so far.
    std::snprintf(rate_text, sizeof rate_text, "%.1f it/s", rate);
    std::fprintf(stderr, "%s%s %lld%s%s | %s | %s%s", tty_ ? "\r\033[K" : "", label_.c_str(),
                 static_cast<long long>(done), metrics.empty() ? "" : " | ", metrics.c_str(),
                 rate_text, ((final ? "took " : "") + format_duration(elapsed)).c_str(),
                 tty_ && !final ? "" : "\n");
    std::fflush(stderr);
    return;
  }
  if (rate >= 1.0 || rate == 0.0)
    std::snprintf(rate_text, sizeof rate_text, "%.1f it/s", rate);
  else
    std::snprintf(rate_text, sizeof rate_text, "%.1f s/it", 1.0 / rate);
  std::fprintf(stderr, "%s%s [%s] %lld/%lld %3.0f%%%s%s | %s | %s%s", tty_ ? "\r\033[K" : "",
               label_.c_str(), bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), pct, metrics.empty() ? "" : " | ", metrics.c_str(),
               rate_text, timing.c_str(), tty_ && !final ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace mixprec::app
