// `mixprec video serve`: the video stream live in a browser. One generator thread makes the
// frames (several streams batched in one forward per denoising step), an HTTP server fans them
// out to the viewers as MJPEG with a page of live figures and controls (video_serve_http.h).
// SIGINT or SIGTERM stops it cleanly: viewers are ended, the frame in progress finishes.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>

#include "cli_args.h"
#include "commands.h"
#include "live_video.h"
#include "video_common.h"
#include "video_serve_http.h"

namespace mixprec::app {
namespace {

// Blocks SIGINT and SIGTERM in this thread and every thread started after, so they are
// delivered only to wait_for_stop() below, never in the middle of a kernel or a socket call.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Waits for SIGINT/SIGTERM, or for the generator to fail; returns the signal (0: a failure).
int wait_for_stop(const sigset_t& signals, const LiveVideo& live) {
  const timespec poll{0, 200'000'000};
  while (live.failure().empty()) {
    const int signal = sigtimedwait(&signals, nullptr, &poll);
    if (signal > 0) return signal;
  }
  return 0;
}

}  // namespace

int run_video_serve(Args args) {
  std::string host = "127.0.0.1", checkpoint = default_video_model_path(), precision = "auto";
  int64_t port = 8080, steps = 4, streams = 1, max_viewers = 8, seed = 0, video = 0;
  int64_t jpeg_quality = 92;
  double fps = 25, context_noise = std::nan("");  // unset: the model file's level
  ArgParser p("video serve",
              "Serve the video stream live: a page with the stream, its frame rate and latency,\n"
              "and controls, at http://HOST:PORT/ (JSON at /api/figures and /api/health).");
  p.option("--bind", &host, "address to listen on (loopback by default; 0.0.0.0 is everyone)");
  p.option("--port", &port, "port to listen on (0: any free port, printed)", {0, 65535});
  p.option("--checkpoint", &checkpoint, "model file written by 'mixprec video train'");
  p.option("--precision", &precision, "auto | fp32 | fp16 | bf16 | autocast-bf16 | autocast-fp16");
  p.option("--steps", &steps, "DDIM steps per frame", {1, kMaxSteps});
  p.option("--streams", &streams,
           "independent streams (held-out videos N, N+1, ...; seeds S, "
           "S+1, ...), batched in one forward per denoising step",
           {1, 16});
  p.option("--video", &video, "held-out video the first stream starts from (0: the first one)",
           {0, kMaxStartVideo});
  p.option("--seed", &seed, "noise seed of the first stream", {0, kMaxSeed});
  p.option("--context-noise", &context_noise,
           "std of noise added to the context before each frame (default: the model file's "
           "level, else 0)",
           {0, kMaxContextNoise});
  p.option("--fps", &fps,
           "frame rate to pace the stream to (late frames are counted); 0: as fast as it goes",
           {0, 240});
  p.option("--max-viewers", &max_viewers, "viewers at a time; more get 503", {1, 64});
  p.option("--jpeg-quality", &jpeg_quality, "JPEG quality of the streamed frames", {1, 100});
  if (!p.parse(args)) return 0;
  parse_inference_precision(precision);  // a bad name is a usage mistake, before loading
  if (!is_loopback(host))
    std::fprintf(stderr,
                 "video serve: warning: listening on %s, not loopback: anyone who can reach this "
                 "machine can watch the stream and change its controls\n",
                 host.c_str());

  const sigset_t stop_signals = block_stop_signals();
  LiveVideo live({.checkpoint = checkpoint,
                  .streams = streams,
                  .target_fps = fps,
                  .jpeg_quality = static_cast<int>(jpeg_quality),
                  .initial = {.start_video = video,
                              .seed = seed,
                              .steps = steps,
                              .precision = precision,
                              .context_noise = context_noise}});
  LiveVideoServer server(live, {.max_viewers = max_viewers});
  const int bound = server.bind(host, static_cast<int>(port));
  std::printf(
      "video serve: http://%s:%d/  (%lld stream%s, %lld steps, %s; up to %lld viewers; "
      "Ctrl-C stops)\n",
      host.c_str(), bound, static_cast<long long>(streams), streams == 1 ? "" : "s",
      static_cast<long long>(steps), precision.c_str(), static_cast<long long>(max_viewers));
  std::fflush(stdout);

  live.start();
  std::thread http([&] { server.serve(); });
  const int signal = wait_for_stop(stop_signals, live);
  live.stop();  // ends every viewer's stream, then the generator
  server.stop();
  http.join();
  const std::string failure = live.failure();
  if (!failure.empty()) {
    std::fprintf(stderr, "mixprec: error: the generator stopped: %s\n", failure.c_str());
    return 1;
  }
  std::printf("video serve: stopped by %s after %lld frames\n",
              signal == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(live.frames()));
  return 0;
}

}  // namespace mixprec::app
