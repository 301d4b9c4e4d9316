// run_in_forked_child: every way a child can end, and the parent unharmed by each.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <stdexcept>
#include <thread>

#include "mixprec/core/forked_child.h"

namespace mixprec {
namespace {

using namespace std::chrono_literals;

TEST(ForkedChild, AnExitStatusComesBack) {
  EXPECT_EQ(run_in_forked_child([] { return 0; }, 60s).end, ChildOutcome::End::Exited);
  const ChildOutcome seven = run_in_forked_child([] { return 7; }, 60s);
  EXPECT_TRUE(seven.exited());
  EXPECT_FALSE(seven.crash_signal());
  EXPECT_EQ(seven.code, 7);
  EXPECT_EQ(seven.describe(60s), "exited with status 7");
}

TEST(ForkedChild, AnExceptionInTheChildIsAnExitNotAnEscape) {
  const ChildOutcome thrown = run_in_forked_child([]() -> int { throw std::runtime_error("no"); }, 60s);
  EXPECT_EQ(thrown.end, ChildOutcome::End::Exited);
  EXPECT_EQ(thrown.code, 125);
}

void exit_quietly(int) { ::_exit(0); }

TEST(ForkedChild, ACrashKillsOnlyTheChild) {
  int survivor = 41;
  // A handler of the parent's (as a sanitizer or libFuzzer installs) that would turn the crash
  // into a normal exit: the child runs with the default action instead and dies by the signal.
  struct sigaction quiet {}, before {};
  quiet.sa_handler = exit_quietly;
  sigaction(SIGBUS, &quiet, &before);
  for (const int sig : {SIGSEGV, SIGBUS, SIGABRT}) {
    const ChildOutcome crash = run_in_forked_child(
        [sig, &survivor] {
          survivor = 0;  // the child's copy only
          std::raise(sig);
          return 0;
        },
        60s);
    EXPECT_TRUE(crash.crash_signal());
    EXPECT_EQ(crash.end, ChildOutcome::End::Signalled);
    EXPECT_EQ(crash.code, sig);
    EXPECT_NE(crash.describe(60s).find("killed by signal " + std::to_string(sig)), std::string::npos);
  }
  sigaction(SIGBUS, &before, nullptr);
  EXPECT_EQ(survivor, 41);
}

TEST(ForkedChild, ABadReadIsASegfault) {
  // A page that may not be read (not a null pointer, which UBSan would catch first).
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  const ChildOutcome crash = run_in_forked_child([page] { return *static_cast<volatile int*>(page); }, 60s);
  ::munmap(page, 4096);
  EXPECT_EQ(crash.end, ChildOutcome::End::Signalled);
  EXPECT_EQ(crash.code, SIGSEGV);
}

TEST(ForkedChild, StoppingIsNotCrashingAndCtrlCIsTheParentsToHandle) {
  const ChildOutcome terminated = run_in_forked_child(
      [] {
        std::raise(SIGTERM);
        return 0;
      },
      60s);
  EXPECT_EQ(terminated.end, ChildOutcome::End::Signalled);
  EXPECT_EQ(terminated.code, SIGTERM);
  EXPECT_FALSE(terminated.crash_signal());
  // SIGINT (a Ctrl-C reaches the whole process group) is ignored in the child.
  const ChildOutcome interrupted = run_in_forked_child(
      [] {
        std::raise(SIGINT);
        return 3;
      },
      60s);
  EXPECT_TRUE(interrupted.exited());
  EXPECT_EQ(interrupted.code, 3);
}

TEST(ForkedChild, AHangIsKilledAtTheTimeout) {
  const ChildOutcome hung = run_in_forked_child(
      [] {
        for (;;) ::pause();
        return 0;
      },
      100ms);
  EXPECT_EQ(hung.end, ChildOutcome::End::TimedOut);
  EXPECT_FALSE(hung.exited());
  EXPECT_FALSE(hung.crash_signal());
  EXPECT_EQ(hung.describe(100ms), "timed out after 100 ms");
}

TEST(ForkedChild, AProcessThatIgnoresSIGCHLDStillLearnsHowTheChildEnded) {
  // With SIGCHLD ignored the kernel reaps children at once and waitpid has no status to give:
  // the byte the child writes as it leaves tells an exit from a death.
  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGCHLD, &ignore, &before);
  const ChildOutcome five = run_in_forked_child([] { return 5; }, 60s);
  const ChildOutcome crash = run_in_forked_child(
      [] {
        std::raise(SIGSEGV);
        return 0;
      },
      60s);
  sigaction(SIGCHLD, &before, nullptr);
  EXPECT_TRUE(five.exited());
  EXPECT_EQ(five.code, 5);
  EXPECT_FALSE(crash.exited());
  EXPECT_EQ(crash.describe(60s), "killed by a signal");
}

TEST(ForkedChild, WorksWhileOtherThreadsRun) {
  // The parent's other threads do not exist in the child; the child does not need them.
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) std::this_thread::yield();
  });
  for (int i = 0; i < 5; ++i) EXPECT_EQ(run_in_forked_child([i] { return i; }, 60s).code, i);
  stop = true;
  busy.join();
}

}  // namespace
}  // namespace mixprec
