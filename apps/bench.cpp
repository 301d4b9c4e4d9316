// `mixprec bench <video|train|generate|stream>`: end-to-end benchmarks of the applications. The kernel
// benchmarks are separate programs in bench/ (make bench).
#include "commands.h"

namespace mixprec::app {
namespace {

constexpr Command kBenchmarks[] = {
    {"video",
     "video generation: precisions x presets x DDIM steps (ms/frame, FPS, memory,\n"
     "PSNR vs fp32), baselines with --save / --compare, Markdown + SVG report",
     run_bench_video},
    {"train",
     "GPT training step: fp32 / bf16 / bf16 params + master / fp16 + scaler, and\n"
     "PyTorch f32 and bf16 autocast on the identical model",
     run_bench_train},
    {"generate",
     "GPT text generation: the whole window, the KV cache, and the KV cache replayed\n"
     "from a captured graph, fp32 and bf16 (ms per token, same tokens)",
     run_bench_generate},
    {"stream",
     "the streaming peak-finding pipeline: HDF5 vs ZeroMQ input (u16 / f32 on the\n"
     "wire) x batch: frames/s, latency percentiles, F1",
     run_bench_stream},
};

}  // namespace

int run_bench(Args args) {
  return run_command_group(
      {"bench", "benchmark", "", kBenchmarks,
       "Run 'mixprec bench <benchmark> --help' for its options. Kernel benchmarks: make bench."},
      args);
}

}  // namespace mixprec::app
