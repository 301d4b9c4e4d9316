// `mixprec stream <produce|peaks|run>`: detector frames for serial crystallography, and Bragg-peak
// finding on them (issue #13; docs/STREAM.md).
#include <cstdio>
#include <string>

#include "commands.h"

namespace mixprec::app {

int run_stream(Args args) {
  const std::string_view sub = args.empty() ? "--help" : args[0];
  if (sub == "produce") return run_stream_produce(args.subspan(1));
  if (sub == "peaks") return run_stream_peaks(args.subspan(1));
  if (sub == "run") return run_stream_run(args.subspan(1));
  if (sub == "--help" || sub == "-h") {
    std::printf(
        "Usage: mixprec stream <command> [options]\n\n"
        "X-ray detector frames and Bragg-peak finding, as a serial-crystallography beamline runs\n"
        "them (docs/STREAM.md).\n\n"
        "Commands:\n"
        "  produce    synthetic detector frames with their true peaks, into an HDF5 file or\n"
        "             pushed over ZeroMQ\n"
        "  peaks      find the peaks of every frame of an HDF5 file into a CXI peak list\n"
        "  run        the same as a streaming pipeline (reader, bounded queue, batcher, writer)\n"
        "             on an HDF5 file or on frames pulled from ZeroMQ\n\n"
        "Run 'mixprec stream <command> --help' for its options.\n");
    return 0;
  }
  throw UsageError{"stream: unknown command '" + std::string(sub) + "' (produce|peaks|run)"};
}

}  // namespace mixprec::app
