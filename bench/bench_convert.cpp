// Conversion throughput (kernels::convert) per kernel level, at 1 and 2 threads, next to two
// copies of the same traffic in the same run: memcpy (glibc, as any program gets it) and a
// non-temporal streaming copy (the bandwidth probe: what a pure streaming kernel can reach on
// this machine). Arrays are far larger than the last-level cache.
//
// Bandwidth counts bytes read plus bytes written: converting n elements between f32 and a
// 16-bit type moves 6n bytes, and each copy it is compared with copies 3n bytes (3n read + 3n
// written). Not a test: nothing here passes or fails (DESIGN.md section 7).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::bench {
namespace {

constexpr const char* kUsage =
    "Usage: bench_convert [--quick] [--json]\n"
    "Throughput of f32->bf16, f32->f16, bf16->f32, f16->f32 in GB/s (bytes read + written) per\n"
    "kernel level at 1 and 2 threads, next to memcpy and a streaming copy of the same traffic.\n"
    "Full run: 64M elements (256 MiB f32 + 128 MiB 16-bit), every level, median of 7 rounds.\n"
    "--quick: 16M elements, scalar and the best level, median of 3 rounds (a few seconds).";

// 64-byte aligned; every page touched up front so that no timed run pays first-touch faults.
struct Buffer {
  explicit Buffer(std::size_t bytes)
      : size(bytes),
        data(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    if (data == nullptr) {
      std::fprintf(stderr, "bench_convert: cannot allocate %zu bytes\n", bytes);
      std::exit(1);
    }
    std::memset(data, 0, bytes);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::size_t size;
  unsigned char* data;
};

// The streaming probe: 64-byte lines loaded and written with non-temporal stores, so the
// destination is not read first (no write-allocate). Only intrinsics in here: a function built
// for another ISA must not instantiate anything inline (see src/kernels/cpu/convert/convert_kernels.h).
__attribute__((target("avx2"))) void stream_lines(unsigned char* dst, const unsigned char* src,
                                                  std::size_t lines) {
  for (std::size_t i = 0; i < lines; ++i) {
    const auto* s = reinterpret_cast<const __m256i*>(src + 64 * i);
    auto* d = reinterpret_cast<__m256i*>(dst + 64 * i);
    const __m256i a = _mm256_load_si256(s), b = _mm256_load_si256(s + 1);
    _mm256_stream_si256(d, a);
    _mm256_stream_si256(d + 1, b);
  }
  _mm_sfence();
}

void stream_copy(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
  const auto lines = static_cast<int64_t>(bytes / 64);
  parallel_for(0, lines, int64_t{1} << 14, [&](int64_t lo, int64_t hi) {
    stream_lines(dst + 64 * lo, src + 64 * lo, static_cast<std::size_t>(hi - lo));
  });
  std::memcpy(dst + 64 * lines, src + 64 * lines, bytes % 64);
}

void parallel_memcpy(unsigned char* dst, const unsigned char* src, std::size_t bytes) {
  parallel_for(0, static_cast<int64_t>(bytes), int64_t{1} << 20, [&](int64_t lo, int64_t hi) {
    std::memcpy(dst + lo, src + lo, static_cast<std::size_t>(hi - lo));
  });
}

struct Conversion {
  DType from, to;
};
constexpr Conversion kConversions[] = {{DType::F32, DType::BF16},
                                       {DType::F32, DType::F16},
                                       {DType::BF16, DType::F32},
                                       {DType::F16, DType::F32}};

double gbps(std::size_t bytes, const Timing& t) {
  return static_cast<double>(bytes) / t.median_s / 1e9;
}

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  const Options o = parse_options(argc, argv, kUsage);
  const std::size_t n = o.quick ? std::size_t{16} << 20 : std::size_t{64} << 20;
  const int reps = o.quick ? 3 : 7;
  const int max_threads = num_threads();
  std::vector<int> thread_counts{1};
  if (max_threads >= 2) thread_counts.push_back(2);
  std::vector<IsaLevel> levels;
  for (IsaLevel level : kAllIsaLevels)
    if (isa_supported(level) && (!o.quick || level == IsaLevel::Scalar || level == best_isa()))
      levels.push_back(level);
  const bool have_probe = isa_supported(IsaLevel::Avx2);

  // Ordinary numbers of many magnitudes (no NaN, no subnormal: the common case).
  Buffer wide(n * 4), narrow(n * 2);
  auto* f = reinterpret_cast<float*>(wide.data);
  for (std::size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i % 1000003) * 1e-3f - 500.0f;
  const std::size_t traffic = n * 6;  // bytes read + written by one conversion
  Buffer copy_src(traffic / 2), copy_dst(traffic / 2);

  // Every case runs once per round, rounds repeated: slow drifts of a shared machine's memory
  // bandwidth then spread over all cases alike instead of favouring whichever ran first.
  struct Case {
    std::string op, level;
    IsaLevel isa;
    int threads;
    std::function<void()> run;
    std::vector<double> seconds;
  };
  std::vector<Case> cases;
  for (const int threads : thread_counts) {
    cases.push_back({"memcpy",
                     "-",
                     IsaLevel::Scalar,
                     threads,
                     [&] { parallel_memcpy(copy_dst.data, copy_src.data, copy_src.size); },
                     {}});
    if (have_probe)
      cases.push_back({"stream-copy",
                       "avx2",
                       IsaLevel::Scalar,
                       threads,
                       [&] { stream_copy(copy_dst.data, copy_src.data, copy_src.size); },
                       {}});
  }
  for (const Conversion c : kConversions)
    for (const IsaLevel level : levels)
      for (const int threads : thread_counts) {
        const void* src = c.from == DType::F32 ? wide.data : narrow.data;
        void* dst = c.from == DType::F32 ? narrow.data : wide.data;
        cases.push_back({std::string(dtype_name(c.from)) + "->" + std::string(dtype_name(c.to)),
                         std::string(isa_name(level)),
                         level,
                         threads,
                         [=] { kernels::convert(src, c.from, dst, c.to, n); },
                         {}});
      }
  const DispatchConfig config_before = dispatch_config();
  for (int round = -1; round < reps; ++round)  // round -1 is the warm-up
    for (Case& c : cases) {
      DispatchConfig at = config_before;
      at.level = c.isa;
      set_dispatch_config(at);
      set_num_threads(c.threads);
      const auto t0 = std::chrono::steady_clock::now();
      c.run();
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (round >= 0) c.seconds.push_back(dt);
    }
  set_dispatch_config(config_before);
  set_num_threads(max_threads);

  auto timing = [](std::vector<double> s) {
    std::sort(s.begin(), s.end());
    return Timing{s[s.size() / 2], s.front(), s.back(), static_cast<int>(s.size())};
  };
  std::vector<double> memcpy_gbps(3, 0), stream_gbps(3, NAN);  // by thread count
  for (const Case& c : cases) {
    if (c.op == "memcpy") memcpy_gbps[c.threads] = gbps(traffic, timing(c.seconds));
    if (c.op == "stream-copy") stream_gbps[c.threads] = gbps(traffic, timing(c.seconds));
  }
  std::vector<Row> rows;
  for (const Case& c : cases) {
    const Timing t = timing(c.seconds);
    const double g = gbps(traffic, t);
    rows.push_back(Row{}
                       .text("op", c.op)
                       .text("level", c.level)
                       .num("threads", c.threads, 0)
                       .num("gb_per_s", g, 1)
                       .num("pct_memcpy", 100 * g / memcpy_gbps[c.threads], 0)
                       .num("pct_stream_copy", 100 * g / stream_gbps[c.threads], 0)
                       .num("median_ms", t.median_s * 1e3)
                       .num("min_ms", t.min_s * 1e3)
                       .num("max_ms", t.max_s * 1e3));
  }

  if (!o.json)
    std::printf(
        "bench_convert: %zu elements (f32 %zu MiB, 16-bit %zu MiB), %zu MiB moved per "
        "run; median of %d rounds (each round runs every case once) after a warm-up "
        "round; %s, %d threads\n\n",
        n, n * 4 >> 20, n * 2 >> 20, traffic >> 20, reps, cpu_features().model.c_str(),
        max_threads);
  print_table(rows, o);
  if (!o.json) std::printf("\n");
  print_json("convert", rows,
             {{"elements", std::to_string(n)},
              {"bytes_per_run", std::to_string(traffic)},
              {"repetitions", std::to_string(reps)}});
  return 0;
}
