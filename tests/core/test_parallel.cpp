// parallel_for and its pool: every index once, chunks of at least a grain, nesting, several
// callers at once, errors, a late (preempted) worker that must not hold up the caller, and
// the caller running alone after a worker held it up.
#include "mixprec/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace mixprec;

namespace {

// Sets the thread count (and optionally a worker delay) for one scope.
class ThreadsScope {
 public:
  explicit ThreadsScope(int threads, std::chrono::microseconds delay = {}) : saved_(num_threads()) {
    set_num_threads(threads);
    detail::set_worker_delay(delay);
  }
  ~ThreadsScope() {
    set_num_threads(saved_);
    detail::set_worker_delay({});
  }

 private:
  int saved_;
};

// How often each index of [begin, end) was visited, and the shortest chunk but the last.
struct Coverage {
  std::vector<int> visits;
  int64_t shortest = INT64_MAX;
};

Coverage cover(int64_t begin, int64_t end, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<std::size_t>(end - begin));
  std::atomic<int64_t> shortest{INT64_MAX};
  parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) visits[static_cast<std::size_t>(i - begin)]++;
    int64_t s = shortest.load();
    while (hi - lo < s && !shortest.compare_exchange_weak(s, hi - lo)) {
    }
  });
  Coverage c;
  for (auto& v : visits) c.visits.push_back(v.load());
  c.shortest = shortest.load();
  return c;
}

}  // namespace

TEST(ParallelFor, EveryIndexOnceInChunksOfAtLeastAGrain) {
  for (int threads : {1, 2, 3, 5}) {
    const ThreadsScope scope(threads);
    for (int64_t n : {0, 1, 2, 7, 63, 64, 65, 1000, 4099})
      for (int64_t grain : {-3, 1, 2, 5, 64, 5000}) {
        const Coverage c = cover(-17, -17 + n, grain);
        for (std::size_t i = 0; i < c.visits.size(); ++i)
          ASSERT_EQ(c.visits[i], 1) << "threads " << threads << " n " << n << " grain " << grain
                                    << " index " << i;
        if (n > 0) {
          EXPECT_GE(c.shortest, std::min<int64_t>(n, std::max<int64_t>(grain, 1)));
        }
      }
  }
}

TEST(ParallelFor, NestedCallsRunInline) {
  const ThreadsScope scope(3);
  std::atomic<int> inner_total{0};
  EXPECT_FALSE(in_parallel_region());
  parallel_for(0, 64, 1, [&](int64_t lo, int64_t hi) {
    EXPECT_TRUE(in_parallel_region());
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(0, 100, 1, [&](int64_t a, int64_t b) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      inner_total += static_cast<int>((b - a) * (hi - lo));
    });
  });
  EXPECT_FALSE(in_parallel_region());
  EXPECT_EQ(inner_total.load(), 64 * 100);
}

TEST(ParallelFor, SeveralCallersAtOnce) {
  const ThreadsScope scope(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 2000; ++rep)
        parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) { total += hi - lo; });
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), int64_t{4} * 2000 * 100);
}

TEST(ParallelFor, AnErrorReachesTheCallerAndThePoolGoesOn) {
  const ThreadsScope scope(2);
  EXPECT_THROW(parallel_for(0, 1000, 1,
                            [&](int64_t lo, int64_t) {
                              if (lo >= 500) throw std::runtime_error("chunk failed");
                            }),
               std::runtime_error);
  EXPECT_FALSE(in_parallel_region());
  const Coverage c = cover(0, 1000, 1);
  for (int v : c.visits) ASSERT_EQ(v, 1);
}

// The caller waits for chunks, not for threads: a worker that wakes 300 ms late (preempted)
// finds the work done by the others, and a stream of calls goes on meanwhile.
TEST(ParallelFor, ALateWorkerDoesNotHoldUpTheCaller) {
  const ThreadsScope scope(2, std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 50; ++rep) {
    const Coverage c = cover(0, 256, 1);
    for (int v : c.visits) ASSERT_EQ(v, 1);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 250.0) << "50 calls waited for the late worker";
}

// A worker that holds a chunk 30 ms (descheduled with it) makes the caller wait; its next calls
// then run alone, every chunk on the caller's thread.
TEST(ParallelFor, AfterWaitingForAHeldChunkTheCallerRunsAlone) {
  const ThreadsScope scope(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> held{false};
  for (int attempt = 0; attempt < 20 && !held; ++attempt) {
    std::atomic<int> done{0};
    parallel_for(0, 16, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() == caller) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // time for a worker to join
      } else if (!held.exchange(true)) {
        // Held past the caller's last chunk, however slowly a loaded machine ran the caller's.
        while (done.load() < 15) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
      ++done;
    });
  }
  ASSERT_TRUE(held) << "no worker took a chunk in 20 calls";
  std::atomic<int> elsewhere{0};
  parallel_for(0, 16, 1, [&](int64_t, int64_t) {  // 16 ms: long enough for a worker to join
    if (std::this_thread::get_id() != caller) ++elsewhere;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(elsewhere.load(), 0);
}

// While another thread keeps a core busy, the caller goes alone (a held-up chunk, or two looks
// 10 ms apart that see the competitor) and stays alone past its solo period (10 ms at first):
// back with the workers, it would wait for the next preempted chunk (bench video --load 1: p99
// 13.9 ms against 10.2 ms at one thread, before).
TEST(ParallelFor, ASoloPeriodGoesOnWhileAnotherThreadWantsACore) {
  const ThreadsScope scope(2);
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool busy = detail::others_runnable();
  const std::thread::id caller = std::this_thread::get_id();
  auto calls_elsewhere = [&] {  // chunks of one call that ran on another thread than the caller
    std::atomic<int> elsewhere{0};
    parallel_for(0, 16, 1, [&](int64_t, int64_t) {  // 16 ms: long enough for a worker to join
      if (std::this_thread::get_id() != caller) ++elsewhere;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    return elsewhere.load();
  };
  for (int call = 0; busy && call < 20; ++call) calls_elsewhere();  // 320 ms beside the spinner
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past any solo period so far
  const int elsewhere = busy ? calls_elsewhere() : 0;
  stop = true;
  spinner.join();
  if (!busy) GTEST_SKIP() << "/proc/loadavg says nothing of this machine (pinned on a larger host)";
  EXPECT_EQ(elsewhere, 0);
}

// Many short calls of random sizes on more threads than cores, nested and from two callers,
// with and without a late worker: all must finish (the test's time limit catches a deadlock).
TEST(ParallelFor, StressNoDeadlock) {
  for (auto delay : {std::chrono::microseconds(0), std::chrono::microseconds(50)}) {
    const ThreadsScope scope(4, delay);
    std::atomic<int64_t> total{0};
    auto hammer = [&](uint32_t seed) {
      for (int rep = 0; rep < 3000; ++rep) {
        seed = seed * 1664525u + 1013904223u;
        const int64_t n = seed % 300;
        parallel_for(0, n, 1 + seed % 7, [&](int64_t lo, int64_t hi) {
          total += hi - lo;
          if (seed % 5 == 0) parallel_for(0, 3, 1, [](int64_t, int64_t) {});
        });
        total -= n;
      }
    };
    std::thread other(hammer, 7u);
    hammer(11u);
    other.join();
    EXPECT_EQ(total.load(), 0);
  }
}

// ScopedSoleThread: the usual chunks, every one on the chosen thread (0 the caller, 1.. a
// worker), each index once; a bad index is refused; the scope ends and threads mix again.
TEST(ParallelFor, SoleThreadRunsEveryChunkOnTheChosenThread) {
  ThreadsScope scope(3);
  for (int index = 0; index < 3; ++index) {
    std::mutex mutex;
    std::set<std::thread::id> ran_on;
    std::vector<int> visits(1000);
    int chunks = 0;
    {
      ScopedSoleThread sole(index);
      parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
        std::lock_guard lock(mutex);
        ran_on.insert(std::this_thread::get_id());
        ++chunks;
        for (int64_t i = lo; i < hi; ++i) ++visits[static_cast<std::size_t>(i)];
      });
    }
    EXPECT_EQ(ran_on.size(), 1u) << "thread " << index;
    EXPECT_EQ(ran_on.count(std::this_thread::get_id()), index == 0 ? 1u : 0u);
    EXPECT_EQ(chunks, 3 * detail::kChunksPerThread);
    for (int v : visits) ASSERT_EQ(v, 1);
  }
  EXPECT_THROW(ScopedSoleThread(3), std::exception);
  EXPECT_THROW(ScopedSoleThread(-1), std::exception);
}

// Two different workers chosen in turn are two different threads.
TEST(ParallelFor, SoleThreadsAreDistinctWorkers) {
  ThreadsScope scope(3);
  auto thread_of = [](int index) {
    ScopedSoleThread sole(index);
    std::thread::id id;
    parallel_for(0, 100, 1, [&](int64_t, int64_t) { id = std::this_thread::get_id(); });
    return id;
  };
  EXPECT_NE(thread_of(1), thread_of(2));
  EXPECT_EQ(thread_of(1), thread_of(1));
}
