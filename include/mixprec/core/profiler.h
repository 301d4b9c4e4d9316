#pragma once
// Where a step's time goes, op by op, as torch.profiler's table shows it (`mixprec bench train
// --profile`). While a Profile is active on a thread, every timed scope on that thread adds its
// time under its name: the kernels op front-ends launch (capture::launch, by kernel name), the
// nodes backward runs (by node name), the optimizer's work (clipping, unscaling, the update).
// Only the outermost timed scope counts, so a backward node's time includes the kernels it
// runs and nothing is counted twice; what no scope covers (autograd bookkeeping, allocation,
// op front-ends deciding what to run) is the framework's own time: the step's time minus
// total(). Pool workers are not timed: their chunks are inside the caller's kernel.
//
//   profiler::Profile profile;
//   { profiler::ScopedProfile on(profile); trainer.step(i); }
//   for (const auto& [name, e] : profile.entries()) ...
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace mixprec::profiler {

// An op's time and calls, apart for backward (inside autograd::backward) and the rest.
struct Entry {
  double seconds = 0, backward_seconds = 0;
  int64_t calls = 0, backward_calls = 0;
};

class Profile {
 public:
  void add(std::string_view name, double seconds, bool in_backward);
  const std::map<std::string, Entry, std::less<>>& entries() const { return entries_; }
  double total_seconds() const;
  void clear() { entries_.clear(); }

 private:
  std::map<std::string, Entry, std::less<>> entries_;
};

namespace detail {
inline thread_local Profile* active = nullptr;
inline thread_local int depth = 0;  // timed scopes open on this thread
inline thread_local bool in_backward = false;
}  // namespace detail

// Marks this thread's work as backward's for its lifetime (the autograd engine holds one).
class BackwardPhase {
 public:
  BackwardPhase() : previous_(detail::in_backward) { detail::in_backward = true; }
  ~BackwardPhase() { detail::in_backward = previous_; }
  BackwardPhase(const BackwardPhase&) = delete;
  BackwardPhase& operator=(const BackwardPhase&) = delete;

 private:
  bool previous_;
};

// Makes `profile` this thread's active profile for the guard's lifetime.
class ScopedProfile {
 public:
  explicit ScopedProfile(Profile& profile) : previous_(detail::active) {
    detail::active = &profile;
  }
  ~ScopedProfile() { detail::active = previous_; }
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;

 private:
  Profile* previous_;
};

// Times its scope into this thread's active profile under `name` (a string that outlives the
// scope: a literal or a node's name), if it is the outermost timed scope. Without an active
// profile it costs one thread-local read.
class Timer {
 public:
  explicit Timer(std::string_view name) : profile_(detail::active), name_(name) {
    if (profile_ != nullptr && detail::depth++ == 0) start_ = std::chrono::steady_clock::now();
  }
  ~Timer() {
    if (profile_ == nullptr) return;
    if (--detail::depth == 0)
      profile_->add(
          name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
          detail::in_backward);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  Profile* profile_;
  std::string_view name_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace mixprec::profiler
