#pragma once
// Threads: one process-wide pool; MIXPREC_NUM_THREADS caps the count (default: all cores the
// process may use). A parallel_for splits its range into more chunks than threads and the
// threads claim chunks one by one, the caller among them, so a thread the OS preempts (a busy
// machine) delays the call by at most the chunk it holds: the others take the rest. The caller
// waits for the chunks, never for a thread to show up. Idle threads spin briefly, then sleep
// (docs/PERFORMANCE.md, "Threads on a busy machine").
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace mixprec {

int num_threads();                // threads a parallel region uses
void set_num_threads(int count);  // >= 1; also what MIXPREC_NUM_THREADS sets at start-up

// True on a thread that is running a parallel_for body: a parallel_for there runs inline.
bool in_parallel_region();

namespace detail {
// Chunks per thread a range is split into at most: enough that a preempted thread's share is
// small, few enough that claiming a chunk (one atomic add) stays negligible.
inline constexpr int64_t kChunksPerThread = 8;
// Calls run(context, c) for every c in [0, chunks) on up to `threads` threads, the caller
// among them; returns when all are done. The first exception a chunk throws is rethrown here
// (the chunks not yet started are skipped).
void run_chunks(int64_t chunks, int threads, void (*run)(void*, int64_t), void* context);

// Test aid: each worker sleeps this long after it wakes for a job, before it looks at it, as
// if the OS had preempted it there. Zero (the default) turns it off.
void set_worker_delay(std::chrono::microseconds delay);

// Whether another task wants a CPU right now: the system's runnable tasks (/proc/loadavg) less
// the caller and `own_runnable` other threads of ours. Always false where this process may not
// run on every online CPU (pinned in a container on a larger host): the count is then the
// host's. The pool runs a caller alone for a while after a worker held it up, after a brief
// hold-up while this holds, or when two looks 10 ms apart both find it true; it keeps the caller
// alone, for twice as long each time, while this holds at the end of that while.
bool others_runnable(int own_runnable = 0);
}  // namespace detail

// While alive, every parallel_for the constructing thread calls runs all its chunks on one pool
// thread: `index` 0 is the calling thread itself, 1..num_threads()-1 a worker. The chunks are
// the usual ones (as many as num_threads() would make). Which thread takes which chunk
// otherwise varies from call to call, so a thread's per-thread scratch (grown on demand by the
// kernels) may meet a size it has not met before: a graph's capture replays once on each thread
// alone so that no later replay grows one.
class ScopedSoleThread {
 public:
  explicit ScopedSoleThread(int index);
  ~ScopedSoleThread();
  ScopedSoleThread(const ScopedSoleThread&) = delete;
  ScopedSoleThread& operator=(const ScopedSoleThread&) = delete;

 private:
  int previous_;
};

// Calls body(lo, hi) on disjoint chunks covering [begin, end), each at least `grain` long, in
// parallel when the range holds at least two grains. Which thread runs a chunk, and how many
// chunks there are, varies with the thread count and the machine's load: a body's result must
// depend on its range only (a reduction keeps a split that does not depend on threads).
template <typename Body>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = num_threads();
  const int64_t chunks = std::min(n / grain, threads * detail::kChunksPerThread);
  if (threads <= 1 || chunks <= 1 || in_parallel_region()) {
    body(begin, end);
    return;
  }
  auto run_chunk = [&](int64_t c) { body(begin + n * c / chunks, begin + n * (c + 1) / chunks); };
  detail::run_chunks(
      chunks, threads,
      [](void* context, int64_t c) { (*static_cast<decltype(run_chunk)*>(context))(c); },
      &run_chunk);
}

}  // namespace mixprec
