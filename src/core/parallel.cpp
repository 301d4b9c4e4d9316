#include "mixprec/core/parallel.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

std::atomic<int>& thread_slot() {
  static std::atomic<int> slot{[] {
    const int available = omp_get_max_threads();
    const char* env = std::getenv("MIXPREC_NUM_THREADS");
    if (env == nullptr || *env == '\0') return available;
    char* end = nullptr;
    const long requested = std::strtol(env, &end, 10);
    MIXPREC_CHECK(*end == '\0' && requested >= 1, "MIXPREC_NUM_THREADS='", env,
                  "' is not a positive integer");
    return static_cast<int>(requested < available ? requested : available);
  }()};
  return slot;
}

}  // namespace

int num_threads() { return thread_slot().load(std::memory_order_relaxed); }

void set_num_threads(int count) {
  MIXPREC_CHECK(count >= 1, "[set_num_threads] expected a count >= 1, got ", count);
  thread_slot().store(count, std::memory_order_relaxed);
}

}  // namespace mixprec
