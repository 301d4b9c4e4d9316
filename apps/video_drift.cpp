// `mixprec video drift`: error accumulation over long streams. Each model generates a long
// stream from the ground-truth first frame of held-out videos; every generated frame is
// compared (PSNR) with the dataset's true continuation. A model whose errors feed back and grow
// loses PSNR with the frame index; history augmentation is meant to flatten that curve.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/json.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_quality.h"
#include "progress.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

// Each video's quality report, then how many videos are alive in every window.
void print_quality(const std::string& path, int64_t first_video, int64_t seed,
                   const std::vector<models::VideoQualityReport>& reports) {
  for (std::size_t v = 0; v < reports.size(); ++v)
    std::printf("%s, held-out video %lld, noise seed %lld:\n%s", path.c_str(),
                static_cast<long long>(first_video + static_cast<int64_t>(v)),
                static_cast<long long>(seed + static_cast<int64_t>(v)),
                models::quality_report_text(reports[v]).c_str());
  std::printf("%s: alive (every measure within bounds) per window:", path.c_str());
  for (std::size_t w = 0; w < reports.front().windows.size(); ++w) {
    int alive = 0;
    for (const auto& r : reports) alive += models::judge(r.windows[w]).pass ? 1 : 0;
    std::printf("  %lld-%lld: %d/%zu", static_cast<long long>(reports.front().windows[w].first),
                static_cast<long long>(reports.front().windows[w].last), alive, reports.size());
  }
  std::printf("\n");
}

}  // namespace

int run_video_drift(Args args) {
  std::string models_list, precision = "bf16", csv;
  int64_t frames = 600, steps = 4, videos = 4, seed = 0, window = 100;
  std::string json_path;
  double context_noise = std::nan("");    // unset: the model file's level
  double still_threshold = std::nan("");  // unset: the model file's
  bool free_maps = false;
  int64_t anchor_refresh = models::StreamRequest{}.anchor_refresh;
  ArgParser p("video drift",
              "Roll models out for many frames from held-out ground-truth first frames and\n"
              "report PSNR against the true continuation, frame by frame (next to the last true\n"
              "frame frozen: what copying it would score), and the quality report per window.");
  p.option("--models", &models_list,
           "comma-separated model files (e.g. with,without augmentation); MODEL+RESTORER runs "
           "a restorer ('video train --restorer') on every frame MODEL predicts");
  p.option("--frames", &frames, "frames to generate per video", {.min = 1});
  p.option("--steps", &steps, "DDIM steps per frame");
  p.option("--videos", &videos, "held-out videos to average over", {.min = 1});
  p.option("--precision", &precision, "fp32 | fp16 | bf16 | autocast-bf16 | auto");
  p.option("--seed", &seed, "noise seed");
  p.option("--context-noise", &context_noise,
           "std of noise added to the context before each frame (the level a model with "
           "noise-level conditioning is told; default: the model file's, else 0)",
           {.min = 0});
  p.option("--still-threshold", &still_threshold,
           "pixels whose sampled change stays below this in every channel keep the last frame's "
           "value (0: off; default: the model file's, else 0)",
           {.min = 0});
  p.flag("--free-maps", &free_maps,
         "an anchor-map model reads each frame through its map as composed, pixel by pixel, "
         "instead of moving each open region as one rigid body (for comparison)");
  p.option("--anchor-refresh", &anchor_refresh,
           "anchor-map models: show the network the newest frame as its anchor every N frames "
           "(0: always the stream's first, real frame; shapes are still read from it; docs/VIDEO.md)",
           {.min = 0});
  p.option("--csv", &csv, "write frame,psnr_<model>... to this file");
  p.option("--window", &window, "frames per window of the quality report", {.min = 1});
  p.option("--json", &json_path, "write every video's quality report to this JSON file");
  if (!p.parse(args)) return 0;
  const std::vector<std::string> paths = split_list(models_list);
  if (paths.empty()) throw UsageError{"video drift: --models needs at least one model file"};
  const InferencePrecision prec = parse_inference_precision(precision);

  // psnr[m][i]: model m's PSNR at frame i + 1, averaged over the videos.
  std::vector<std::vector<double>> psnr_by_model;
  std::vector<double> frozen(static_cast<std::size_t>(frames), 0.0);
  std::string json = "{\"frames\": " + std::to_string(frames) + ", \"models\": [";
  for (const std::string& entry : paths) {
    const std::size_t plus = entry.rfind('+');
    const std::string path = entry.substr(0, plus);
    models::VideoModelInfo info;
    auto model = models::load_video_model(path, &info);
    apply_precision(*model, prec);
    std::unique_ptr<models::UNetVideo> restorer;
    if (plus != std::string::npos) {
      restorer = models::load_restorer(entry.substr(plus + 1));
      apply_precision(*restorer, prec);
    }
    models::StreamOptions options = stream_options(info, path,
                                                   {.steps = steps,
                                                    .context_noise = context_noise,
                                                    .still_threshold = still_threshold,
                                                    .rigid_maps = !free_maps,
                                                    .anchor_refresh = anchor_refresh});
    options.restorer = restorer.get();
    const data::MovingShapes data = training_dataset(info, path);
    const data::MovingShapesConfig& config = data.config();
    std::vector<double> sum(static_cast<std::size_t>(frames), 0.0);
    std::vector<models::VideoQualityReport> reports;
    ProgressBar bar("drift " + entry, frames * videos);
    for (int64_t v = 0; v < videos; ++v) {
      const int64_t video = config.held_out(v);
      const int64_t k = model->config().context_frames;  // ground-truth frames to start from
      const Tensor truth = data.clip(video, 0, frames + k);
      options.seed = static_cast<uint64_t>(seed + v);
      models::VideoStream stream(*model, models::NoiseSchedule::cosine(info.schedule_steps),
                                 truth.narrow(0, 0, k), options);
      models::VideoQualityMeter quality(window);
      for (int64_t i = 0; i < frames; ++i) {
        const Tensor frame = stream.next();
        const Tensor real = models::quantize_8bit(truth.select(0, k + i));
        sum[static_cast<std::size_t>(i)] += std::min(60.0, models::psnr(frame, real));
        if (psnr_by_model.empty())  // the baseline once: the last true frame, frozen
          frozen[static_cast<std::size_t>(i)] +=
              std::min(60.0, models::psnr(models::quantize_8bit(truth.select(0, k - 1)), real)) /
              static_cast<double>(videos);
        quality.add(frame, real);
        bar.update(v * frames + i + 1);
      }
      reports.push_back(quality.report());
    }
    bar.finish();
    print_quality(entry, config.held_out(0), seed, reports);
    json += std::string(psnr_by_model.empty() ? "" : ", ") + "{\"model\": " + io::json_quote(entry) +
            ", \"videos\": [";
    for (std::size_t v = 0; v < reports.size(); ++v)
      json += std::string(v ? ", " : "") + "{\"video\": " +
              std::to_string(config.held_out(static_cast<int64_t>(v))) +
              ", \"seed\": " + std::to_string(seed + static_cast<int64_t>(v)) +
              ", \"quality\": " + models::quality_report_json(reports[v]) + "}";
    json += "]}";
    for (double& s : sum) s /= static_cast<double>(videos);
    psnr_by_model.push_back(sum);
  }

  std::printf(
      "PSNR (dB) against the ground-truth continuation, mean of %lld held-out videos, "
      "%lld DDIM steps (direct models: 1 forward), %s\n%8s",
      static_cast<long long>(videos), static_cast<long long>(steps), prec.name.c_str(), "frame");
  for (const std::string& path : paths) std::printf("  %24.24s", path.c_str());
  std::printf("  %24s\n", "frozen last true frame");
  for (int64_t f : {1, 2, 5, 10, 25, 50, 100, 200, 300, 400, 500, 600, 800, 1000}) {
    if (f > frames) break;
    std::printf("%8lld", static_cast<long long>(f));
    for (const auto& curve : psnr_by_model)
      std::printf("  %24.2f", curve[static_cast<std::size_t>(f - 1)]);
    std::printf("  %24.2f\n", frozen[static_cast<std::size_t>(f - 1)]);
  }
  std::printf("%8s", "mean");
  psnr_by_model.push_back(frozen);
  for (const auto& curve : psnr_by_model) {
    double m = 0;
    for (double v : curve) m += v;
    std::printf("  %24.2f", m / static_cast<double>(curve.size()));
  }
  psnr_by_model.pop_back();
  std::printf("\n");
  if (!json_path.empty()) {
    io::AtomicFile file(json_path, "video drift");
    const std::string text = json + "]}\n";
    file.write(text.data(), text.size());
    file.commit();
    std::printf("wrote %s\n", json_path.c_str());
  }
  if (!csv.empty()) {
    std::ofstream file(csv);
    file << "frame";
    for (std::size_t m = 0; m < paths.size(); ++m) file << ",psnr_" << m;
    file << "\n";
    for (int64_t i = 0; i < frames; ++i) {
      file << i + 1;
      for (const auto& curve : psnr_by_model) file << "," << curve[static_cast<std::size_t>(i)];
      file << "\n";
    }
    if (!file) throw Error("[video drift] could not write " + csv);
    std::printf("wrote %s\n", csv.c_str());
  }
  return 0;
}

}  // namespace mixprec::app
