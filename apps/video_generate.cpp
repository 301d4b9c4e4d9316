// `mixprec video generate`: streams frames from a trained UNetVideo, each conditioned on the
// last, timing every frame (p50/p95/p99, FPS), optionally paced to a real-time frame rate with
// missed deadlines counted, checking the stream stays in range, and writing a GIF and PNGs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/core/allocator.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/image.h"
#include "mixprec/io/json.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_quality.h"
#include "progress.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

// Per-frame health: a stream that drifts shows it here long before it is visibly broken.
struct FrameStats {
  double mean = 0, stddev = 0;
  int64_t non_finite = 0;
  double saturated = 0;  // fraction of values at |x| >= 0.99 (clamped by the sampler)
};

FrameStats frame_stats(const Tensor& frame) {
  const Tensor f = frame.to(DType::F64).contiguous();
  FrameStats s;
  double sum = 0, sq = 0;
  int64_t sat = 0;
  for (int64_t i = 0; i < f.numel(); ++i) {
    const double v = f.data<double>()[i];
    if (!std::isfinite(v)) {
      ++s.non_finite;
      continue;
    }
    sum += v;
    sq += v * v;
    sat += std::abs(v) >= 0.99 ? 1 : 0;
  }
  const double n = static_cast<double>(f.numel());
  s.mean = sum / n;
  s.stddev = std::sqrt(std::max(0.0, sq / n - s.mean * s.mean));
  s.saturated = static_cast<double>(sat) / n;
  return s;
}

// Frames [3, H, W] side by side with a 2-pixel white gap: [3, H, n W + 2 (n - 1)].
Tensor filmstrip(const std::vector<Tensor>& frames) {
  const int64_t h = frames.front().size(1), w = frames.front().size(2), gap = 2;
  const auto n = static_cast<int64_t>(frames.size());
  Tensor strip = Tensor::full({3, h, n * w + (n - 1) * gap}, 1.0);
  for (int64_t i = 0; i < n; ++i)
    strip.narrow(2, i * (w + gap), w).copy_(frames[static_cast<std::size_t>(i)]);
  return strip;
}

}  // namespace

int run_video_generate(Args args) {
  std::string checkpoint = default_video_model_path(), restorer, precision = "auto", out = "stream.gif";
  std::string png_dir, strip;
  int64_t strip_every = 50;
  double still_threshold = std::nan("");  // unset: the model file's
  int64_t frames = 500, steps = 4, seed = 0, video = -1, warmup = 2, window = 100;
  double fps = 25.0, context_noise = std::nan("");  // unset: the model file's level
  bool realtime = false, json = false, eager = false, free_maps = false;
  int64_t anchor_refresh = models::StreamRequest{}.anchor_refresh;
  ArgParser p("video generate",
              "Generate a video stream frame by frame with a trained UNetVideo: each frame is\n"
              "sampled by DDIM conditioned on the previous ones (a direct model: one forward\n"
              "each), the first on a dataset video's frames.");
  p.option("--checkpoint", &checkpoint, "model file written by 'mixprec video train'");
  p.option("--restorer", &restorer,
           "a restorer's model file ('video train --restorer'), run on every predicted frame "
           "before it is shown and becomes context");
  p.option("--frames", &frames, "frames to generate");
  p.option("--steps", &steps, "DDIM steps per frame (1, 2, 4, 8, 25, 50, ...)");
  p.option("--precision", &precision, "auto | fp32 | fp16 | bf16 | autocast-bf16 | autocast-fp16");
  p.option("--out", &out, "animated GIF to write ('' for none)");
  p.option("--png-dir", &png_dir, "also write every frame as DIR/frame_00000.png");
  p.option("--strip", &strip,
           "also write frames 0, N, 2N, ... side by side into this PNG (N = --strip-every)");
  p.option("--strip-every", &strip_every, "frames between two frames of the strip");
  p.option("--fps", &fps, "GIF playback rate and the real-time target");
  p.flag("--realtime", &realtime, "pace generation to --fps and count missed deadlines");
  p.option("--seed", &seed, "noise seed");
  p.option("--video", &video, "dataset video whose first frames start the stream (-1: a held-out one)");
  p.option("--context-noise", &context_noise,
           "std of noise added to the context before each frame (models trained with history "
           "augmentation; default: the level the model file recommends, else 0)");
  p.option("--still-threshold", &still_threshold,
           "pixels whose sampled change stays below this in every channel keep the last frame's "
           "value (0: off; default: the model file's, else 0)");
  p.flag("--free-maps", &free_maps,
         "an anchor-map model reads each frame through its map as composed, pixel by pixel, "
         "instead of moving each open region as one rigid body (for comparison)");
  p.option("--anchor-refresh", &anchor_refresh,
           "anchor-map models: show the network the newest frame as its anchor every N frames "
           "(0: always the stream's first, real frame; shapes are still read from it; docs/VIDEO.md)",
           {.min = 0});
  p.option("--warmup", &warmup, "first frames left out of the timing statistics");
  p.option("--window", &window, "frames per window of the quality report");
  p.flag("--json", &json, "print the statistics as one JSON object on stdout");
  p.flag("--eager", &eager,
         "run the op front-ends every frame instead of replaying the graph captured on the first "
         "frame (the same frames bit for bit; docs/GRAPH.md)");
  if (!p.parse(args)) return 0;
  if (frames < 1 || steps < 1 || fps <= 0 || warmup < 0 || context_noise < 0 || window < 1 ||
      strip_every < 1)
    throw UsageError{
        "video generate: --frames, --steps, --window and --strip-every must be >= 1, --fps > 0, "
        "--context-noise >= 0"};
  if (video < -1)
    throw UsageError{"video generate: --video must be a dataset video (>= 0), or -1 for a "
                     "held-out one"};

  const InferencePrecision prec = parse_inference_precision(precision);
  models::ModelStream opened = models::open_model_stream(
      checkpoint, video,
      {.steps = steps,
       .seed = seed,
       .context_noise = context_noise,
       .still_threshold = still_threshold,
       .graph = !eager,
       .restorer = restorer,
       .rigid_maps = !free_maps,
       .anchor_refresh = anchor_refresh},
      prec.weights, prec.plan);
  const models::VideoModelInfo& info = opened.info;
  const models::UNetVideo& model = *opened.model;
  const data::MovingShapes& videos = opened.videos;
  const models::StreamOptions& options = opened.options;
  models::VideoStream& stream = *opened.stream;
  const int64_t size = videos.config().height;
  const int64_t first_video = opened.video;
  const int64_t k = model.config().context_frames;
  steps = options.steps;

  std::vector<Tensor> strip_frames;
  std::optional<io::GifWriter> gif;
  if (!out.empty()) gif.emplace(out, size, size, fps);
  if (!png_dir.empty()) std::filesystem::create_directories(png_dir);
  if (!json)
    std::fprintf(stderr, "video generate: %s (%s, %lld parameters), %lld frames, %s, %s\n",
                 checkpoint.c_str(), info.config.name.c_str(),
                 static_cast<long long>(model.parameter_count()), static_cast<long long>(frames),
                 sampler_text(options).c_str(), prec.name.c_str());

  // The true continuation of the start video, frame by frame: what the report compares with.
  models::VideoQualityMeter quality(window);
  CachingAllocator::global().reset_peak();
  std::vector<double> ms;
  int64_t missed = 0, non_finite = 0;
  double max_saturated = 0, min_std = 1e9, max_std = 0, max_abs_mean = 0;
  ProgressBar bar("video generate", frames);
  using clock = std::chrono::steady_clock;
  const auto period = std::chrono::duration<double>(1.0 / fps);
  const auto stream_start = clock::now();
  for (int64_t i = 0; i < frames; ++i) {
    const auto t0 = clock::now();
    Tensor frame;
    {
      amp::Autocast autocast(prec.autocast_dtype, prec.autocast);
      frame = stream.next();
    }
    const auto t1 = clock::now();
    const double frame_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (i >= warmup) ms.push_back(frame_ms);
    const FrameStats s = frame_stats(frame);
    non_finite += s.non_finite;
    max_saturated = std::max(max_saturated, s.saturated);
    min_std = std::min(min_std, s.stddev);
    max_std = std::max(max_std, s.stddev);
    max_abs_mean = std::max(max_abs_mean, std::abs(s.mean));
    quality.add(frame, models::quantize_8bit(videos.frame(first_video, k + i)));
    if (gif) gif->add_frame(frame.select(0, 0));
    if (!strip.empty() && i % strip_every == 0) strip_frames.push_back(frame.select(0, 0));
    if (!png_dir.empty()) {
      char name[32];
      std::snprintf(name, sizeof name, "/frame_%05lld.png", static_cast<long long>(i));
      io::write_png(png_dir + name, frame.select(0, 0));
    }
    if (realtime) {
      const auto deadline = stream_start + period * static_cast<double>(i + 1);
      if (clock::now() > deadline)
        ++missed;
      else
        std::this_thread::sleep_until(deadline);
    }
    if (!json) {
      char metrics[64];
      std::snprintf(metrics, sizeof metrics, "%.1f ms/frame", frame_ms);
      bar.update(i + 1, metrics);
    }
  }
  if (gif) gif->close();
  if (!strip.empty()) io::write_png(strip, filmstrip(strip_frames));
  const double p50 = median(ms), p95 = percentile(ms, 95), p99 = percentile(ms, 99);
  double total_ms = 0;
  for (double v : ms) total_ms += v;
  // No timed frames (--frames <= --warmup): no timing statistic, not a zero.
  const double mean_ms =
      ms.empty() ? std::nan("") : total_ms / static_cast<double>(ms.size());
  const double peak_mib =
      static_cast<double>(CachingAllocator::global().stats().peak_allocated_bytes) / (1 << 20);
  const double rss_mib = static_cast<double>(peak_rss_bytes()) / (1 << 20);
  const bool stable = non_finite == 0 && max_saturated < 0.5 && min_std > 0.02;
  const models::VideoQualityReport report = quality.report();
  if (json) {
    using io::json_number;
    std::printf(
        "{\"checkpoint\": %s, \"preset\": \"%s\", \"precision\": \"%s\", \"frames\": %lld, "
        "\"steps\": %lld, \"timed_frames\": %zu, \"ms_per_frame\": {\"mean\": %s, \"p50\": %s, "
        "\"p95\": %s, \"p99\": %s}, \"fps\": %s, \"realtime\": %s, \"target_fps\": %s, "
        "\"missed_deadlines\": %lld, \"peak_allocated_mib\": %s, \"peak_rss_mib\": %s, "
        "\"non_finite\": %lld, \"max_saturated_fraction\": %s, \"frame_std_range\": [%s, "
        "%s], \"max_abs_frame_mean\": %s, \"stable\": %s, \"start_video\": %lld, \"quality\": %s}\n",
        io::json_quote(checkpoint).c_str(), info.config.name.c_str(), prec.name.c_str(),
        static_cast<long long>(frames), static_cast<long long>(steps), ms.size(),
        json_number(mean_ms).c_str(), json_number(p50).c_str(), json_number(p95).c_str(),
        json_number(p99).c_str(), json_number(1000.0 / mean_ms).c_str(),
        realtime ? "true" : "false", json_number(fps).c_str(), static_cast<long long>(missed),
        json_number(peak_mib).c_str(), json_number(rss_mib).c_str(),
        static_cast<long long>(non_finite), json_number(max_saturated).c_str(),
        json_number(min_std).c_str(), json_number(max_std).c_str(),
        json_number(max_abs_mean).c_str(), stable ? "true" : "false",
        static_cast<long long>(first_video), models::quality_report_json(report).c_str());
  } else {
    bar.finish();
    std::printf("frames        %lld (%zu timed after %lld warm-up)\n",
                static_cast<long long>(frames), ms.size(), static_cast<long long>(warmup));
    if (ms.empty()) {
      std::printf("ms/frame      n/a: no frame after the %lld warm-up frames (--warmup)\n",
                  static_cast<long long>(warmup));
    } else {
      std::printf("ms/frame      p50 %.2f  p95 %.2f  p99 %.2f  mean %.2f  -> %.1f FPS\n", p50,
                  p95, p99, mean_ms, 1000.0 / mean_ms);
      std::printf("targets       25 FPS (p99 <= 40 ms): %s   p50 <= 16 ms: %s\n",
                  p99 <= 40 ? "met" : "missed", p50 <= 16 ? "met" : "missed");
    }
    if (realtime)
      std::printf("real time     %.1f FPS target, %lld missed deadlines\n", fps,
                  static_cast<long long>(missed));
    std::printf("memory        allocator peak %.1f MiB, process peak RSS %.1f MiB\n", peak_mib,
                rss_mib);
    // "In range" only says the numbers are sane; whether the picture is alive is the quality
    // report's verdict, summed up first.
    std::printf("in range      %s: non-finite %lld, max saturated %.2f%%, frame std %.3f..%.3f\n",
                stable ? "yes" : "NO", static_cast<long long>(non_finite), 100 * max_saturated,
                min_std, max_std);
    int64_t alive = 0;
    for (const models::WindowQuality& w : report.windows) alive += models::judge(w).pass;
    std::printf("alive         %lld of %zu windows (every measure within bounds)\n",
                static_cast<long long>(alive), report.windows.size());
    std::printf("quality       start video %lld, windows of %lld frames vs its true continuation\n%s",
                static_cast<long long>(first_video), static_cast<long long>(window),
                models::quality_report_text(report).c_str());
    if (gif) std::printf("wrote %s\n", out.c_str());
    if (!strip.empty())
      std::printf("wrote %s (frames 0, %lld, ... side by side)\n", strip.c_str(),
                  static_cast<long long>(strip_every));
  }
  return stable ? 0 : 1;
}

}  // namespace mixprec::app
