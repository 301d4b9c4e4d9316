// `mixprec stream <produce|peaks|run>`: detector frames for serial crystallography, and Bragg-peak
// finding on them (issue #13; docs/STREAM.md).
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"

namespace mixprec::app {
namespace {

// `stream serve`: a long-running worker, which is `stream run` on frames pulled from a socket:
// --bind E is --zmq E --zmq-bind, --connect E is --zmq E; every other option is run's.
int run_stream_serve(Args args) {
  std::vector<std::string_view> translated;
  bool endpoint = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf(
          "Usage: mixprec stream serve (--bind ENDPOINT | --connect ENDPOINT) --output peaks.cxi\n"
          "                            (--geometry FILE.h5 | --detector NAME) [stream run options]\n\n"
          "A worker that pulls detector frames from a ZeroMQ socket until its producers end, a\n"
          "signal or --idle-timeout, finds their peaks (--finder classic | net --model FILE) and\n"
          "writes a CXI peak list: `stream run` with --bind E meaning --zmq E --zmq-bind and\n"
          "--connect E meaning --zmq E. Several workers pulling from one producer share its\n"
          "frames (docs/STREAM.md). The options are stream run's:\n\n");
      const std::string_view help[] = {"--help"};
      return run_stream_run(help);
    }
    if ((args[i] == "--bind" || args[i] == "--connect") && i + 1 < args.size()) {
      if (endpoint) throw UsageError{"stream serve: one of --bind or --connect, once"};
      endpoint = true;
      translated.push_back("--zmq");
      translated.push_back(args[i + 1]);
      if (args[i] == "--bind") translated.push_back("--zmq-bind");
      ++i;
      continue;
    }
    if (args[i] == "--zmq" || args[i] == "--zmq-bind" || args[i] == "--input")
      throw UsageError{"stream serve: use --bind or --connect (" + std::string(args[i]) + " is stream run's)"};
    translated.push_back(args[i]);
  }
  if (!endpoint) throw UsageError{"stream serve: --bind ENDPOINT or --connect ENDPOINT is required"};
  return run_stream_run(translated);
}

constexpr Command kStreamCommands[] = {
    {"produce",
     "synthetic detector frames with their true peaks, into an HDF5 file or\n"
     "pushed over ZeroMQ",
     run_stream_produce},
    {"peaks", "find the peaks of every frame of an HDF5 file into a CXI peak list",
     run_stream_peaks},
    {"run",
     "the same as a streaming pipeline (reader, bounded queue, batcher, writer)\n"
     "on an HDF5 file or on frames pulled from ZeroMQ; --finder net runs PeakNet",
     run_stream_run},
    {"serve", "a worker pulling frames from a ZeroMQ socket (--bind or --connect)",
     run_stream_serve},
    {"train", "train PeakNet, the peak segmentation network, on synthetic frames",
     run_stream_train},
    {"calibrate", "choose a trained PeakNet's peak rule on held-out frames",
     run_stream_calibrate},
};

}  // namespace

int run_stream(Args args) {
  return run_command_group(
      {"stream", "command",
       "X-ray detector frames and Bragg-peak finding, as a serial-crystallography beamline runs\n"
       "them (docs/STREAM.md).",
       kStreamCommands, "Run 'mixprec stream <command> --help' for its options."},
      args);
}

}  // namespace mixprec::app
