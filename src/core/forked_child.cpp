#include "mixprec/core/forked_child.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iterator>
#include <utility>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

constexpr int kUncaughtStatus = 125;

// Both ends of a pipe, closed on every path (non-blocking: the child writes one byte, the
// parent polls).
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (::pipe2(fd, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(std::string("[fork] cannot make a pipe: ") + std::strerror(errno));
  }
  ~Pipe() {
    close_end(0);
    close_end(1);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_end(int i) {
    if (fd[i] >= 0) ::close(std::exchange(fd[i], -1));
  }
};

// The signals that mean the code crashed (rather than that someone stopped the process).
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};

// Every handler the parent installed is the parent's business: the CLI's removes the run's
// temporary files (the parent's CXI being written), a sanitizer's or libFuzzer's reports a crash
// as the parent's. The child runs with the default action for every signal, ignores SIGINT
// (Ctrl-C reaches the whole process group; the parent decides), dies with the parent, and
// leaves no core file (its crash is expected and reported by the parent).
void prepare_child() {
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) (void)::sigaction(sig, &fallback, nullptr);  // KILL, STOP: refused
  std::signal(SIGINT, SIG_IGN);
  sigset_t crashes;
  sigemptyset(&crashes);
  for (const int sig : kCrashSignals) sigaddset(&crashes, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &crashes, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const rlimit no_core{0, 0};
  (void)::setrlimit(RLIMIT_CORE, &no_core);
}

[[noreturn]] void child_main(const std::function<int()>& work, int done_fd, pid_t parent) {
  prepare_child();
  if (::getppid() != parent) ::_exit(kUncaughtStatus);  // the parent died before prctl
  int status = kUncaughtStatus;
  try {
    status = work();
  } catch (...) {
  }
  const char byte = static_cast<char>(status);
  (void)!::write(done_fd, &byte, 1);
  ::_exit(status);
}

ChildOutcome from_wait_status(int status) {
  if (WIFSIGNALED(status)) return {ChildOutcome::End::Signalled, WTERMSIG(status)};
  return {ChildOutcome::End::Exited, WEXITSTATUS(status)};
}

// How a child that is leaving (it wrote its byte or closed its end) ended: its wait status
// (retried when a signal, e.g. libFuzzer's SIGALRM, interrupts), or, when this process does
// not keep its children's statuses (SIGCHLD ignored: waitpid fails with ECHILD), the byte it
// wrote (none: a signal killed it, which one is lost).
ChildOutcome outcome_of_leaving(pid_t pid, int done_fd) {
  int status = 0;
  pid_t ended;
  while ((ended = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (ended == pid) return from_wait_status(status);
  unsigned char byte = 0;
  if (::read(done_fd, &byte, 1) == 1) return {ChildOutcome::End::Exited, byte};
  return {ChildOutcome::End::Signalled, 0};
}

}  // namespace

bool ChildOutcome::crash_signal() const {
  return end == End::Signalled && std::find(std::begin(kCrashSignals), std::end(kCrashSignals), code) != std::end(kCrashSignals);
}

std::string ChildOutcome::describe(std::chrono::milliseconds timeout) const {
  switch (end) {
    case End::Exited: return "exited with status " + std::to_string(code);
    case End::Signalled:
      if (code == 0) return "killed by a signal";
      return "killed by signal " + std::to_string(code) + " (" + strsignal(code) + ")";
    case End::TimedOut:
      return "timed out after " + std::to_string(timeout.count()) + " ms";
  }
  return "ended";
}

ChildOutcome run_in_forked_child(const std::function<int()>& work, std::chrono::milliseconds timeout) {
  Pipe done;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("[fork] cannot start a child process: ") + std::strerror(errno));
  if (pid == 0) {
    done.close_end(0);
    child_main(work, done.fd[1], parent);
  }
  done.close_end(1);
  // The child writes one byte as it leaves, or dies and its end closes: either wakes poll. A
  // child forked concurrently by another thread may hold a copy of the write end, so the wait
  // also looks at the child itself between short polls.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      (void)outcome_of_leaving(pid, done.fd[0]);
      return {ChildOutcome::End::TimedOut, 0};
    }
    pollfd p{done.fd[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50))) > 0)
      return outcome_of_leaving(pid, done.fd[0]);
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return from_wait_status(status);
  }
}

}  // namespace mixprec
