// `mixprec bench <video|train|stream>`: end-to-end benchmarks of the applications. The kernel
// benchmarks are separate programs in bench/ (make bench).
#include <cstdio>
#include <string>

#include "commands.h"

namespace mixprec::app {

int run_bench(Args args) {
  const std::string_view sub = args.empty() ? "--help" : args[0];
  if (sub == "video") return run_bench_video(args.subspan(1));
  if (sub == "train") return run_bench_train(args.subspan(1));
  if (sub == "stream") return run_bench_stream(args.subspan(1));
  if (sub == "--help" || sub == "-h") {
    std::printf(
        "Usage: mixprec bench <benchmark> [options]\n\n"
        "Benchmarks:\n"
        "  video   video generation: precisions x presets x DDIM steps (ms/frame, FPS, memory,\n"
        "          PSNR vs fp32), baselines with --save / --compare, Markdown + SVG report\n"
        "  train   GPT training step: fp32 / bf16 / bf16 params + master / fp16 + scaler, and\n"
        "          PyTorch f32 and bf16 autocast on the identical model\n"
        "  stream  the streaming peak-finding pipeline: HDF5 vs ZeroMQ input (u16 / f32 on the\n"
        "          wire) x batch: frames/s, latency percentiles, F1\n\n"
        "Run 'mixprec bench <benchmark> --help' for its options. Kernel benchmarks: make bench.\n");
    return 0;
  }
  throw UsageError{"bench: unknown benchmark '" + std::string(sub) + "'"};
}

}  // namespace mixprec::app
