// mixprec: the command line. `mixprec --help` lists the commands.
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "commands.h"
#include "mixprec/core/error.h"
#include "run_guard.h"

namespace mixprec::app {
namespace {

constexpr Command kCommands[] = {
    {"info", "CPU, ISA features, kernel level and recommended precision", run_info},
    {"inspect", "tensors of a safetensors file: name, dtype, shape, min/max/mean", run_inspect},
    {"convert", "convert a safetensors file's floating tensors to f32/f16/bf16", run_convert},
    {"video", "real-time video diffusion: train, generate (FPS, GIF), drift, serve", run_video},
    {"train", "train a GPT language model in mixed precision", run_train},
    {"precision", "per-layer precision plans (--precision plan:FILE)", run_precision},
    {"bench", "end-to-end benchmarks: video matrix, GPT training step and generation", run_bench},
    {"stream", "detector frames: synthetic producer, Bragg peaks into CXI files", run_stream},
};

void print_help() {
  std::printf(
      "Usage: mixprec [--help] [--version] <command> [options]\n\n"
      "mixprec: mixed-precision (f32/f16/bf16) deep learning in C++.\n\n"
      "Commands:\n");
  for (const Command& c : kCommands)
    std::printf("  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                static_cast<int>(c.summary.size()), c.summary.data());
  std::printf(
      "\nRun 'mixprec <command> --help' for a command's options.\n\n"
      "Environment:\n"
      "  MIXPREC_ISA=scalar|avx2|avx512|avx512bf16|amx  force a kernel level\n"
      "  MIXPREC_BF16_CONV=auto|dot|widen               bf16 convolution compute\n"
      "  MIXPREC_PACK_WEIGHTS=1|0                       keep inference weights packed\n"
      "  MIXPREC_NUM_THREADS=N                          cap the worker threads\n");
}

int run(Args args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return 0;
  }
  if (args[0] == "--version") {
    std::printf("mixprec 0.1.0\n");
    return 0;
  }
  for (const Command& c : kCommands)
    if (c.name == args[0]) return c.run(args.subspan(1));
  throw UsageError{"unknown command '" + std::string(args[0]) + "' (see 'mixprec --help')"};
}

}  // namespace
}  // namespace mixprec::app

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  mixprec::app::remove_temporaries_on_signal();  // no half-written file outlives Ctrl-C
  try {
    return mixprec::app::run(args);
  } catch (const mixprec::app::UsageError& e) {
    std::fprintf(stderr, "mixprec: %s\n", e.message.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixprec: error: %s\n", e.what());
    return 1;
  }
}
