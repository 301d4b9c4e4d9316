#pragma once
// Busy competitors for latency benchmarks (`mixprec bench video --load`, bench/bench_parallel):
// N processes that each keep one core busy, as a training or a build beside the engine would,
// until the object dies (or this process does: PR_SET_PDEATHSIG).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::app {

class BusyLoad {
 public:
  BusyLoad(int64_t count, const std::string& who) {
    const pid_t parent = getpid();
    for (int64_t i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid < 0) throw std::runtime_error("[" + who + "] could not start a busy process");
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        volatile uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      pids_.push_back(pid);
    }
  }
  ~BusyLoad() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  BusyLoad(const BusyLoad&) = delete;
  BusyLoad& operator=(const BusyLoad&) = delete;

 private:
  std::vector<pid_t> pids_;
};

}  // namespace mixprec::app
