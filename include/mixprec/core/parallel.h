#pragma once
// Threads: OpenMP underneath; MIXPREC_NUM_THREADS caps the count (default: all cores).
#include <omp.h>

#include <cstdint>

namespace mixprec {

int num_threads();                // threads a parallel region uses
void set_num_threads(int count);  // >= 1; also what MIXPREC_NUM_THREADS sets at start-up

// Calls body(lo, hi) on disjoint chunks covering [begin, end), each at least `grain` long
// (except the last), in parallel when the range is large enough to pay for it.
template <typename Body>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(max_chunks < num_threads() ? max_chunks : num_threads());
  if (threads <= 1) {
    body(begin, end);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t lo = begin + n * t / threads;
    const int64_t hi = begin + n * (t + 1) / threads;
    if (lo < hi) body(lo, hi);
  }
}

}  // namespace mixprec
