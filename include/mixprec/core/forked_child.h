#pragma once
// Runs a piece of work in a forked child process, so that a crash inside a library we cannot
// fix (libhdf5 on a corrupt file) kills the child and not the caller. The parent learns only
// how the child ended; it then does the same work itself when the child came through.
//
// Fork in a multi-threaded process: only the forking thread exists in the child. The child
// therefore must not wait on anything another thread would provide: no thread pool (no
// parallel_for, no OpenMP region), no lock another thread may have held at the fork (glibc's
// malloc is reset at fork and may be used). It leaves through _exit, so no atexit handler and
// no static destructor of the parent's objects runs twice (libhdf5's would flush the parent's
// open files). Every signal is at its default action in the child (SIGINT ignored: Ctrl-C is the
// parent's to handle), so a crash there ends the child by its signal whatever handlers the
// parent has (the CLI's would remove the run's temporary files; a sanitizer's or libFuzzer's
// would report the crash, and save an artifact, as the parent's own). The child dies with the
// parent (PR_SET_PDEATHSIG).
#include <chrono>
#include <functional>
#include <string>

namespace mixprec {

struct ChildOutcome {
  enum class End { Exited, Signalled, TimedOut };
  End end = End::Exited;
  int code = 0;  // the exit status (Exited) or the signal number (Signalled)

  bool exited() const { return end == End::Exited; }  // it came through, with any status
  bool crash_signal() const;  // killed by SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP or SIGSYS
  // "exited with status 0", "killed by signal 11 (Segmentation fault)", "timed out after 2000 ms".
  std::string describe(std::chrono::milliseconds timeout) const;
};

// Forks; the child runs `work` and exits with its return value (an exception out of it exits
// with status 125). The parent waits at most `timeout`, then kills the child with SIGKILL.
// The child is always reaped. Error when the process cannot fork.
ChildOutcome run_in_forked_child(const std::function<int()>& work, std::chrono::milliseconds timeout);

}  // namespace mixprec
