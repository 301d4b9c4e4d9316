// bench_parallel: how steady a frame made of many parallel regions stays, quiet and beside busy
// processes the benchmark starts itself. A synthetic "frame" is R parallel_for regions of U
// units of fixed arithmetic each (defaults: 200 x 16 units of about 8 us, like a video frame's
// few hundred kernels). Rows: the engine's pool (parallel_for) and, as the peer, the OpenMP
// static split parallel_for used before session 9 (one slice per thread, a barrier at the end),
// at 1 and 2 threads; p50 / p99 ms per frame. Every row computes the same numbers (checked).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "busy_load.h"
#include "mixprec/core/parallel.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int64_t load = 1, frames = 300, warmup = 20, regions = 200, units = 16;
  double unit_us = 8;
  bool json = false;
};

// One unit of work: a dependent chain of multiply-adds (no memory traffic), `iters` long.
double unit_work(int64_t unit, int64_t iters) {
  double x = 1.0 + static_cast<double>(unit) * 1e-3;
  for (int64_t i = 0; i < iters; ++i) x = x * 0.999999 + 1e-6;
  return x;
}

// The pre-session-9 parallel_for: an OpenMP region, thread t runs the t-th slice.
template <typename Body>
void omp_static_for(int64_t n, int threads, const Body& body) {
  if (threads <= 1) return body(0, n);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    body(n * t / threads, n * (t + 1) / threads);
  }
}

struct Row {
  std::string scheduler;
  int threads;
  int64_t load;
  double p50, p99, checksum;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(rank, v.size() - 1)];
}

Row run(const Config& c, bool pool, int threads, int64_t iters) {
  std::vector<double> out(static_cast<std::size_t>(c.units));
  auto body = [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) out[static_cast<std::size_t>(u)] += unit_work(u, iters);
  };
  mixprec::set_num_threads(threads);
  std::vector<double> ms;
  for (int64_t f = 0; f < c.warmup + c.frames; ++f) {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < c.regions; ++r) {
      if (pool)
        mixprec::parallel_for(0, c.units, 1, body);
      else
        omp_static_for(c.units, threads, body);
    }
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (f >= c.warmup) ms.push_back(t);
  }
  double checksum = 0;
  for (double v : out) checksum += v;
  return {pool ? "pool (parallel_for)" : "OpenMP static split (before)", threads, 0,
          percentile(ms, 50), percentile(ms, 99), checksum};
}

// Iterations for a unit of about `us` microseconds on this core (best of several timings).
int64_t calibrate(double us) {
  const int64_t probe = 100000;
  double best = 1e30;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    volatile double sink = unit_work(i, probe);
    (void)sink;
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return std::max<int64_t>(1, static_cast<int64_t>(us / best * probe));
}

bool parse(int argc, char** argv, Config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--load")
      c.load = std::atoll(value());
    else if (a == "--frames")
      c.frames = std::atoll(value());
    else if (a == "--regions")
      c.regions = std::atoll(value());
    else if (a == "--units")
      c.units = std::atoll(value());
    else if (a == "--unit-us")
      c.unit_us = std::atof(value());
    else if (a == "--json")
      c.json = true;
    else if (a == "--quick")
      c.frames = 60;
    else {
      std::printf(
          "Usage: bench_parallel [--load N] [--frames F] [--regions R] [--units U] "
          "[--unit-us US] [--quick] [--json]\n"
          "p50 / p99 ms per synthetic frame (R parallel regions of U units of US us), the pool\n"
          "vs the OpenMP static split, 1 and 2 threads, quiet and beside N busy processes\n"
          "(default 1) that it starts itself.\n");
      return a == "--help" || a == "-h";
    }
  }
  if (c.load < 0 || c.frames < 2 || c.regions < 1 || c.units < 1 || c.unit_us <= 0)
    throw std::runtime_error("--load >= 0, --frames >= 2, --regions, --units, --unit-us > 0");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    if (!parse(argc, argv, c)) return argc > 1 ? 2 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_parallel: %s\n", e.what());
    return 2;
  }
  const int64_t iters = calibrate(c.unit_us);
  std::vector<Row> rows;
  std::vector<int64_t> loads{0};
  if (c.load > 0) loads.push_back(c.load);
  for (int64_t load : loads) {
    const mixprec::app::BusyLoad busy(load, "bench_parallel");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the load settle
    for (bool pool : {true, false})
      for (int threads : {1, 2}) {
        Row r = run(c, pool, threads, iters);
        r.load = load;
        rows.push_back(r);
      }
  }
  bool same = true;
  for (const Row& r : rows) same = same && r.checksum == rows[0].checksum;
  if (c.json) {
    std::printf("{\"regions\": %lld, \"units\": %lld, \"unit_us\": %.2f, \"same_results\": %s, "
                "\"rows\": [",
                static_cast<long long>(c.regions), static_cast<long long>(c.units), c.unit_us,
                same ? "true" : "false");
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::printf("%s{\"scheduler\": \"%s\", \"threads\": %d, \"busy\": %lld, \"ms_p50\": %.3f, "
                  "\"ms_p99\": %.3f}",
                  i ? ", " : "", rows[i].scheduler.c_str(), rows[i].threads,
                  static_cast<long long>(rows[i].load), rows[i].p50, rows[i].p99);
    std::printf("]}\n");
  } else {
    std::printf("%lld regions x %lld units x %.1f us, %lld frames per row; same results: %s\n\n",
                static_cast<long long>(c.regions), static_cast<long long>(c.units), c.unit_us,
                static_cast<long long>(c.frames), same ? "yes" : "NO");
    std::printf("| busy processes | scheduler | threads | ms/frame p50 | p99 | p99/p50 |\n"
                "|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
      std::printf("| %lld | %s | %d | %.2f | %.2f | %.2f |\n", static_cast<long long>(r.load),
                  r.scheduler.c_str(), r.threads, r.p50, r.p99, r.p99 / r.p50);
  }
  return same ? 0 : 1;
}
