// The f32 sum all-reduce data-parallel training runs every step (core/communicator.h), at the
// gradient sizes of docs/DISTRIBUTED.md: time per call and bus bandwidth (2 (N-1)/N x bytes / s,
// what a ring moves per rank). Run it as the trainers run: `mpirun -np 2 build/bench/bench_allreduce`.
// Every call starts after a barrier, so the figure is the reduction, not waiting for a late rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "mixprec/core/communicator.h"

int main() {
  const mixprec::Communicator world;
  if (!world.distributed()) {
    std::printf("bench_allreduce: run it under mpirun -np N (N >= 2)\n");
    return 0;
  }
  constexpr int kRepeats = 10;
  struct Size {
    const char* what;
    std::size_t floats;
  };
  const Size sizes[] = {{"256 KiB", 65536},
                        {"4 MiB (a default bucket)", 1 << 20},
                        {"GPT 4 x 256 (bench_data_parallel.sh)", 3257856},
                        {"GPT small (train gpt default)", 10844160}};
  if (world.is_root())
    std::printf("%d ranks, f32 sum, best / median of %d calls\n%-40s %10s %10s %12s\n",
                world.size(), kRepeats, "gradients", "best ms", "median ms", "bus GB/s");
  for (const Size& s : sizes) {
    std::vector<float> buffer(s.floats, 1.0f);
    std::vector<double> ms;
    for (int i = 0; i < kRepeats; ++i) {
      world.barrier();
      const auto start = std::chrono::steady_clock::now();
      world.all_reduce_sum(buffer);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    const double bytes = 4.0 * static_cast<double>(s.floats);
    const double bus = 2.0 * (world.size() - 1) / world.size() * bytes / (ms.front() * 1e6);
    if (world.is_root())
      std::printf("%-40s %10.2f %10.2f %12.2f\n", s.what, ms.front(), ms[ms.size() / 2], bus);
  }
  return 0;
}
