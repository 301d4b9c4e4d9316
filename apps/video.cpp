// `mixprec video <train|generate|drift|serve>`: live-stream video diffusion from the command line.
#include <cstdio>
#include <string>

#include "commands.h"

namespace mixprec::app {

int run_video(Args args) {
  const std::string_view sub = args.empty() ? "--help" : args[0];
  if (sub == "train") return run_video_train(args.subspan(1));
  if (sub == "generate") return run_video_generate(args.subspan(1));
  if (sub == "drift") return run_video_drift(args.subspan(1));
  if (sub == "serve") return run_video_serve(args.subspan(1));
  if (sub == "--help" || sub == "-h") {
    std::printf(
        "Usage: mixprec video <command> [options]\n\n"
        "Real-time video diffusion: a U-Net generates 64x64 video frame by frame, each frame\n"
        "conditioned on the one before.\n\n"
        "Commands:\n"
        "  train      train a model on procedural moving-shapes videos (mixed precision)\n"
        "  generate   stream frames from a trained model: FPS, latency percentiles, GIF/PNG\n"
        "  drift      roll two models out for many frames against the ground truth (PSNR)\n"
        "  serve      watch the stream live in a browser: MJPEG, live figures, controls\n\n"
        "Run 'mixprec video <command> --help' for its options.\n");
    return 0;
  }
  throw UsageError{"video: unknown command '" + std::string(sub) +
                   "' (train|generate|drift|serve)"};
}

}  // namespace mixprec::app
