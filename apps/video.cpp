// `mixprec video <train|generate|drift|serve>`: live-stream video diffusion from the command line.
#include "commands.h"

namespace mixprec::app {
namespace {

constexpr Command kVideoCommands[] = {
    {"train", "train a model on procedural moving-shapes videos (mixed precision)",
     run_video_train},
    {"generate", "stream frames from a trained model: FPS, latency percentiles, GIF/PNG",
     run_video_generate},
    {"drift", "roll two models out for many frames against the ground truth (PSNR)",
     run_video_drift},
    {"serve", "watch the stream live in a browser: MJPEG, live figures, controls", run_video_serve},
};

}  // namespace

int run_video(Args args) {
  return run_command_group(
      {"video", "command",
       "Real-time video diffusion: a U-Net generates 64x64 video frame by frame, each frame\n"
       "conditioned on the one before.",
       kVideoCommands, "Run 'mixprec video <command> --help' for its options."},
      args);
}

}  // namespace mixprec::app
