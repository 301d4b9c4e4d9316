// The thread pool behind parallel_for (see parallel.h for the contract).
//
// One job at a time: the caller publishes it, wakes the workers, and claims chunks itself.
// Workers claim chunks from the same atomic counter; whoever finishes the last chunk tells the
// caller. A worker that wakes late finds no chunk left (or no job) and goes back to waiting:
// nothing waits for it. The one place the caller waits on workers as such is the retirement
// of the job (`inside`): a worker between "I look at the job" and "I am done with it" holds a
// reference, which takes a few instructions when it has no chunk to run.
//
// Waiting: spin (pause) for a short budget, then sleep on a futex (C++20 atomic wait). Spinning
// saves a wake-up (tens of microseconds) between the many small regions of a network's step;
// on a busy machine it would burn the time slice a competitor (or a sibling thread) needs, so
// a spinner that finds it was descheduled mid-spin (a gap in its own clock) stops spinning for
// a while and sleeps at once. A sleeping thread also wakes with priority over a busy process,
// which a spinning one does not.
#include "mixprec/core/parallel.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

int env_positive(const char* name, int fallback, int cap) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  MIXPREC_CHECK(*end == '\0' && value >= 0, name, "='", env, "' is not a non-negative integer");
  return static_cast<int>(value < cap ? value : cap);
}

std::atomic<int>& thread_slot() {
  static std::atomic<int> slot{[] {
    const int available = omp_get_max_threads();  // honours the CPU affinity mask
    const int requested = env_positive("MIXPREC_NUM_THREADS", available, available);
    MIXPREC_CHECK(requested >= 1, "MIXPREC_NUM_THREADS='", std::getenv("MIXPREC_NUM_THREADS"),
                  "' is not a positive integer");
    return requested;
  }()};
  return slot;
}

thread_local bool tl_in_region = false;
thread_local int tl_sole_thread = -1;  // ScopedSoleThread's index, or -1

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// How long a waiting thread spins before it sleeps. MIXPREC_SPIN_US sets it (0: sleep at once).
Clock::duration spin_budget() {
  static const Clock::duration budget =
      std::chrono::microseconds(env_positive("MIXPREC_SPIN_US", 100, 100000));
  return budget;
}

std::atomic<std::chrono::microseconds::rep> worker_delay_us{0};

// Set when a spinner was descheduled: until then, waits sleep without spinning.
std::atomic<Clock::rep> contended_until{0};
constexpr auto kDescheduledGap = std::chrono::microseconds(200);  // far above a spin step
constexpr auto kContendedFor = std::chrono::milliseconds(200);

// A caller that waited this much longer than a chunk of its own takes for a worker's chunk
// runs its next calls alone (no workers) for a while. 4 ms is a scheduler time slice, what a
// descheduled worker costs; at 1 ms the wake-up and imbalance jitter of a quiet machine tripped
// it, and a quiet stream's p99 went up by half (bench video, session 9). A shorter hold-up
// (kBriefHold) counts too when another task is runnable at that moment
// (detail::others_runnable): a competitor, not jitter, made the worker late, and the scheduler
// often resumes it within 4 ms.
// The solo period starts short, so a false alarm costs a frame or two, and doubles each time
// it ends while another task still wants a core (up to kSoloLongest); it resets once none does.
// Back with the workers too soon under a lasting competitor, the next preempted chunk holds up
// a frame again: that was the p99 of a stream beside a busy process (session 23).
std::atomic<Clock::rep> solo_until{0};
std::atomic<Clock::rep> solo_period{0};
constexpr auto kHeldUp = std::chrono::milliseconds(4);
constexpr auto kBriefHold = std::chrono::microseconds(500);
constexpr Clock::duration kSoloFirst = std::chrono::milliseconds(10);
constexpr Clock::duration kSoloLongest = std::chrono::milliseconds(1280);
constexpr Clock::duration kLookEvery = std::chrono::milliseconds(10);

void go_solo(Clock::time_point now, Clock::duration period) {
  solo_period.store(period.count(), std::memory_order_relaxed);
  solo_until.store((now + period).time_since_epoch().count(), std::memory_order_relaxed);
}

// Spins until ready() or the budget runs out; true when ready() held.
template <typename Ready>
bool spin_until(const Ready& ready) {
  if (ready()) return true;
  Clock::time_point last = Clock::now();
  if (last.time_since_epoch().count() < contended_until.load(std::memory_order_relaxed))
    return false;
  const Clock::time_point deadline = last + spin_budget();
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    const Clock::time_point now = Clock::now();
    if (now - last > kDescheduledGap) {  // someone else ran on this core: stop spinning
      contended_until.store((now + kContendedFor).time_since_epoch().count(),
                            std::memory_order_relaxed);
      return ready();
    }
    if (now > deadline) return ready();
    last = now;
  }
}

struct Job {
  Job(void (*run_chunk)(void*, int64_t), void* run_context, int64_t chunk_count)
      : run(run_chunk), context(run_context), chunks(chunk_count) {}

  void (*run)(void*, int64_t);
  void* context;
  int64_t chunks;
  int helpers = 0;  // workers 1..helpers may take part
  int sole = -1;    // when > 0, worker `sole` alone runs the chunks (ScopedSoleThread)
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<uint32_t> finished{0}, caller_asleep{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // written once, by the thread that set `failed`

  // Claims and runs chunks until none is left; tells a sleeping caller about the last one.
  // Returns how many chunks this thread ran.
  int64_t work() {
    for (int64_t mine = 0;; ++mine) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return mine;
      if (!failed.load(std::memory_order_relaxed)) {
        try {
          run(context, c);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
        finished.store(1, std::memory_order_seq_cst);
        if (caller_asleep.load(std::memory_order_seq_cst)) finished.notify_one();
      }
    }
  }

  void wait_finished() {
    if (spin_until([&] { return finished.load(std::memory_order_acquire) != 0; })) return;
    caller_asleep.store(1, std::memory_order_seq_cst);
    while (finished.load(std::memory_order_seq_cst) == 0) finished.wait(0);
  }
};

class Pool {
 public:
  // Runs the job with up to `threads` threads; false when the pool is busy with another
  // caller's job (the caller then runs it alone).
  bool run(Job& job, int threads) {
    std::unique_lock lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    start(job, threads - 1);
    const Clock::time_point start = Clock::now();
    const int64_t mine = job.work();
    const Clock::time_point worked = Clock::now();
    job.wait_finished();
    // Held up by a chunk far longer than the caller's own take: a worker was descheduled
    // while it held one. Run alone for a while, as one thread would, then try again.
    const Clock::time_point end = Clock::now();
    const auto waited = end - worked, own = mine > 0 ? (worked - start) / mine : waited;
    const bool held_up =
        mine > 0 && (waited > own + kHeldUp ||
                     (waited > own + kBriefHold && detail::others_runnable(awake_workers())));
    // Every kLookEvery, a look for a competitor even without a hold-up: while the workers run
    // beside one, the caller itself is preempted as often as they are. Two looks in a row must
    // see one: a quiet machine shows a passing task at 1-3% of looks.
    if (end > next_look_) {
      next_look_ = end + kLookEvery;
      seen_in_a_row_ = detail::others_runnable(awake_workers()) ? seen_in_a_row_ + 1 : 0;
    }
    if (held_up || seen_in_a_row_ >= 2) {
      seen_in_a_row_ = 0;
      go_solo(end, kSoloFirst);
    }
    retire();
    return true;
  }

  // Workers not asleep (spinning, running or waiting to run): runnable tasks of our own.
  int awake_workers() const {
    return workers_ - sleepers_.load(std::memory_order_relaxed);
  }

  // Runs the job on worker `sole` alone, waiting for the pool if another caller holds it.
  void run_on(Job& job, int sole) {
    std::unique_lock lock(busy_);
    job.sole = sole;
    start(job, sole);
    job.wait_finished();
    retire();
  }

 private:
  // Publishes the job to workers 1..helpers (starting the missing ones) and wakes them.
  void start(Job& job, int helpers) {
    job.helpers = helpers;
    // A new worker starts from the epoch before this job's, so it sees this job too (a sole
    // thread's job waits for it).
    const uint32_t before = epoch_.load(std::memory_order_seq_cst);
    for (; workers_ < helpers; ++workers_)
      std::thread([this, index = workers_ + 1, before] { worker(index, before); }).detach();
    current_.store(&job, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
  }

  // Takes the finished job down once no worker looks at it any more.
  void retire() {
    current_.store(nullptr, std::memory_order_seq_cst);
    while (inside_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }

  [[noreturn]] void worker(int index, uint32_t seen) {
    tl_in_region = true;  // a parallel_for inside a body runs inline
    for (;;) {
      if (!spin_until([&] { return epoch_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (epoch_.load(std::memory_order_seq_cst) == seen) epoch_.wait(seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = epoch_.load(std::memory_order_acquire);
      if (const auto delay = worker_delay_us.load(std::memory_order_relaxed); delay > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(delay));
      inside_.fetch_add(1, std::memory_order_seq_cst);
      Job* job = current_.load(std::memory_order_seq_cst);
      if (job != nullptr && (job->sole > 0 ? index == job->sole : index <= job->helpers))
        job->work();
      inside_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  std::mutex busy_;
  Clock::time_point next_look_{};  // these two under busy_
  int seen_in_a_row_ = 0;
  int workers_ = 0;  // started so far, detached: the pool lives as long as the process
  std::atomic<Job*> current_{nullptr};
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int> sleepers_{0}, inside_{0};
};

Pool& pool() {
  static Pool* instance = new Pool;  // never destroyed: workers may outlive static destructors
  return *instance;
}

}  // namespace

int num_threads() { return thread_slot().load(std::memory_order_relaxed); }

void set_num_threads(int count) {
  MIXPREC_CHECK(count >= 1, "[set_num_threads] expected a count >= 1, got ", count);
  thread_slot().store(count, std::memory_order_relaxed);
}

bool in_parallel_region() { return tl_in_region; }

namespace detail {

void run_chunks(int64_t chunks, int threads, void (*run)(void*, int64_t), void* context) {
  struct RegionGuard {
    RegionGuard() { tl_in_region = true; }
    ~RegionGuard() { tl_in_region = false; }
  } region;
  Job job(run, context, chunks);
  if (tl_sole_thread >= 0) {
    if (tl_sole_thread == 0)
      job.work();
    else
      pool().run_on(job, tl_sole_thread);
    if (job.failed.load()) std::rethrow_exception(job.error);
    return;
  }
  // Alone when another caller holds the pool, or while workers are being descheduled (see
  // solo_until): a solo period that ends while another task wants a core goes on, twice as long.
  const Clock::time_point now = Clock::now();
  const Clock::rep until = solo_until.load(std::memory_order_relaxed);
  bool solo = now.time_since_epoch().count() < until;
  if (!solo && until != 0) {
    solo = detail::others_runnable(0);  // the workers have slept through the solo period
    if (solo)
      go_solo(now, std::min(2 * Clock::duration(solo_period.load(std::memory_order_relaxed)),
                            kSoloLongest));
    else
      solo_until.store(0, std::memory_order_relaxed);
  }
  if (solo || !pool().run(job, threads)) job.work();
  if (job.failed.load()) std::rethrow_exception(job.error);
}

void set_worker_delay(std::chrono::microseconds delay) {
  worker_delay_us.store(delay.count(), std::memory_order_relaxed);
}

bool others_runnable(int own_runnable) {
  static const bool meaningful = [] {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 &&
           CPU_COUNT(&set) == sysconf(_SC_NPROCESSORS_ONLN);
  }();
  if (!meaningful) return false;
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return false;
  double load1 = 0, load5 = 0, load15 = 0;
  int runnable = 0, total = 0;  // "runnable/total", the caller among the runnable
  const bool read =
      std::fscanf(f, "%lf %lf %lf %d/%d", &load1, &load5, &load15, &runnable, &total) == 5;
  std::fclose(f);
  return read && runnable - 1 - own_runnable > 0;
}

}  // namespace detail

ScopedSoleThread::ScopedSoleThread(int index) : previous_(tl_sole_thread) {
  MIXPREC_CHECK(index >= 0 && index < num_threads(), "[ScopedSoleThread] expected a thread in [0, ",
                num_threads(), "), got ", index);
  tl_sole_thread = index;
}
ScopedSoleThread::~ScopedSoleThread() { tl_sole_thread = previous_; }

}  // namespace mixprec
