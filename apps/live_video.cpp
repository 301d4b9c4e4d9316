#include "live_video.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "commands.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/io/jpeg.h"
#include "mixprec/io/json.h"
#include "mixprec/models/video_model_file.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

using clock = std::chrono::steady_clock;

constexpr std::size_t kWindow = 256;       // frames in the latency percentiles
constexpr std::size_t kChartFrames = 120;  // frames in the page's chart
constexpr auto kFpsWindow = std::chrono::seconds(2);

// The whole text as an integer in [0, max], or nothing.
std::optional<int64_t> parse_integer(const std::string& text, int64_t max) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > max) return {};
  return v;
}

std::optional<double> parse_real(const std::string& text, double max) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0 ||
      v > max)
    return {};
  return v;
}

std::string json_list(const std::deque<double>& values, std::size_t last) {
  std::string out = "[";
  for (std::size_t i = values.size() > last ? values.size() - last : 0; i < values.size(); ++i)
    out += (out.size() > 1 ? ", " : "") + io::json_number(values[i], 4);
  return out + "]";
}

}  // namespace

ParsedControl parse_control(const std::multimap<std::string, std::string>& params) {
  if (params.empty())
    return {{}, "no control given (action, start_video, seed, steps, precision, context_noise)"};
  ControlChange change;
  for (const auto& [name, value] : params) {
    if (params.count(name) > 1) return {{}, name + " is given more than once"};
    if (name == "action") {
      if (value == "restart")
        change.restart = true;
      else if (value == "pause" || value == "resume")
        change.paused = value == "pause";
      else
        return {{}, "action must be restart, pause or resume"};
    } else if (name == "start_video") {
      if (!(change.start_video = parse_integer(value, kMaxStartVideo)))
        return {{},
                "start_video must be an integer in [0, " + std::to_string(kMaxStartVideo) + "]"};
    } else if (name == "seed") {
      if (!(change.seed = parse_integer(value, kMaxSeed)))
        return {{}, "seed must be an integer in [0, " + std::to_string(kMaxSeed) + "]"};
    } else if (name == "steps") {
      if (!(change.steps = parse_integer(value, kMaxSteps)) || *change.steps < 1)
        return {{}, "steps must be an integer in [1, " + std::to_string(kMaxSteps) + "]"};
    } else if (name == "precision") {
      try {
        parse_inference_precision(value);  // the command line's names, one list for both
      } catch (const UsageError& e) {
        return {{}, e.message.substr(2)};  // "--precision must be ..." without the dashes
      }
      change.precision = value;
    } else if (name == "context_noise") {
      if (!(change.context_noise = parse_real(value, kMaxContextNoise)))
        return {{},
                "context_noise must be a number in [0, " + io::json_number(kMaxContextNoise) + "]"};
    } else {
      return {{},
              "unknown control '" + io::json_quote_short(name, 40) +
                  "' (action, start_video, seed, steps, precision, context_noise)"};
    }
  }
  return {change, ""};
}

LiveVideo::LiveVideo(LiveOptions options) : options_(std::move(options)) {
  settings_ = options_.initial;
  load_model(settings_.precision);
  restart_streams(start_frames());
}

LiveVideo::~LiveVideo() { stop(); }

void LiveVideo::start() {
  generator_ = std::thread([this] { run(); });
}

void LiveVideo::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  broadcast_.close();
  if (generator_.joinable()) generator_.join();
}

void LiveVideo::request(const ControlChange& change) {
  {
    std::lock_guard lock(mutex_);
    ControlChange& merged = pending_ ? *pending_ : pending_.emplace();
    merged.restart = merged.restart || change.restart;
    auto take = [](auto& to, const auto& from) {
      if (from) to = from;
    };
    take(merged.start_video, change.start_video);
    take(merged.seed, change.seed);
    take(merged.steps, change.steps);
    take(merged.precision, change.precision);
    take(merged.context_noise, change.context_noise);
    take(merged.paused, change.paused);
  }
  wake_.notify_all();
}

std::string LiveVideo::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

int64_t LiveVideo::frames() const {
  std::lock_guard lock(mutex_);
  return frames_;
}

void LiveVideo::load_model(const std::string& precision) {
  const InferencePrecision p = parse_inference_precision(precision);
  stream_.reset();  // it refers to the model being replaced
  model_ = models::load_video_model(options_.checkpoint, &info_);
  apply_precision(*model_, p);
  videos_ = std::make_unique<data::MovingShapes>(training_dataset(info_, options_.checkpoint));
  autocast_ = p.autocast;
  autocast_dtype_ = p.autocast_dtype;
  std::lock_guard lock(mutex_);
  // Unset (NaN): the level the model file recommends.
  settings_.context_noise =
      stream_setting(info_, options_.checkpoint, "stream_context_noise", settings_.context_noise);
  precision_name_ = p.name;
  model_name_ = info_.config.name;
}

// The first K frames of held-out videos start_video, start_video + 1, ... (one per stream).
std::vector<Tensor> LiveVideo::start_frames() const {
  std::vector<Tensor> first;
  for (int64_t i = 0; i < options_.streams; ++i)
    first.push_back(videos_->clip(videos_->config().held_out(settings_.start_video + i), 0,
                                  model_->config().context_frames));
  return first;
}

void LiveVideo::restart_streams(const std::vector<Tensor>& first_frames,
                                const std::vector<Tensor>& anchors) {
  stream_ = std::make_unique<models::BatchedVideoStream>(
      *model_, models::NoiseSchedule::cosine(info_.schedule_steps), first_frames, stream_options(),
      anchors);
}

models::StreamOptions LiveVideo::stream_options() const {
  return app::stream_options(info_, options_.checkpoint,
                        {.steps = settings_.steps,
                         .seed = settings_.seed,
                         .context_noise = settings_.context_noise,
                         // Replayed from a graph; a control change captures again (the frame
                         // after it takes about four frames' time).
                         .graph = true});
}

void LiveVideo::apply(const ControlChange& change) {
  const bool new_precision = change.precision && *change.precision != settings_.precision;
  // The streams carry on from their last frames on the model in its new precision.
  std::vector<Tensor> recent, anchors;
  if (new_precision) {
    for (int64_t i = 0; i < stream_->streams(); ++i) {
      recent.push_back(stream_->recent_frames(i));
      if (const Tensor a = stream_->anchor(i); a.defined()) anchors.push_back(a);
    }
    load_model(*change.precision);
  }
  {
    std::lock_guard lock(mutex_);
    if (change.precision) settings_.precision = *change.precision;
    if (change.start_video) settings_.start_video = *change.start_video;
    if (change.seed) settings_.seed = *change.seed;
    if (change.steps) settings_.steps = *change.steps;
    if (change.context_noise) settings_.context_noise = *change.context_noise;
    if (change.paused) settings_.paused = *change.paused;
  }
  if (change.restart || change.start_video || change.seed)
    restart_streams(start_frames());
  else if (new_precision)
    restart_streams(recent, anchors);
  else
    stream_->set_options(stream_options());
}

void LiveVideo::run() {
  const auto period = options_.target_fps > 0
                          ? std::chrono::duration_cast<clock::duration>(
                                std::chrono::duration<double>(1.0 / options_.target_fps))
                          : clock::duration::zero();
  clock::time_point deadline;
  try {
    while (true) {
      std::optional<ControlChange> change;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || pending_ || !settings_.paused; });
        if (stopping_) break;
        change.swap(pending_);
      }
      if (change) apply(*change);
      {
        std::lock_guard lock(mutex_);
        if (settings_.paused) continue;
      }
      const auto t0 = clock::now();
      Tensor frames;
      {
        amp::Autocast autocast(autocast_dtype_, autocast_);
        frames = stream_->next();
      }
      const auto t1 = clock::now();
      auto encoded = std::make_shared<pipeline::EncodedFrames>();
      encoded->index = stream_->frames_generated() - 1;
      for (int64_t i = 0; i < frames.size(0); ++i)
        encoded->jpeg.push_back(io::encode_jpeg(frames.narrow(0, i, 1), options_.jpeg_quality));
      broadcast_.publish(std::move(encoded));
      const auto t2 = clock::now();
      // A frame is late when it took longer than the frame period; after a pause or a late
      // frame the schedule starts again from now rather than rushing to catch up.
      bool late = false;
      if (period > clock::duration::zero()) {
        deadline = std::max(deadline, t0) + period;
        late = t2 > deadline;
      }
      using ms = std::chrono::duration<double, std::milli>;
      record(ms(t1 - t0).count(), ms(t2 - t1).count(), late);
      if (!late && period > clock::duration::zero()) {
        std::unique_lock lock(mutex_);
        wake_.wait_until(lock, deadline, [&] { return stopping_; });
      }
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex_);
    failure_ = e.what();
  }
  broadcast_.close();
}

void LiveVideo::record(double generate_ms, double serve_ms, bool late) {
  std::lock_guard lock(mutex_);
  ++frames_;
  late_ += late ? 1 : 0;
  generate_ms_.push_back(generate_ms);
  serve_ms_.push_back(serve_ms);
  if (generate_ms_.size() > kWindow) generate_ms_.pop_front();
  if (serve_ms_.size() > kWindow) serve_ms_.pop_front();
  const auto now = clock::now();
  published_at_.push_back(now);
  while (published_at_.front() < now - kFpsWindow) published_at_.pop_front();
}

std::string LiveVideo::figures_json(int64_t viewers, int64_t max_viewers) const {
  using io::json_number;
  std::lock_guard lock(mutex_);
  const auto now = clock::now();
  double fps = 0;  // 0 while paused or stalled: no frame in the last second
  if (published_at_.size() >= 2 && now - published_at_.back() < std::chrono::seconds(1))
    fps = static_cast<double>(published_at_.size() - 1) /
          std::chrono::duration<double>(published_at_.back() - published_at_.front()).count();
  const std::vector<double> window(generate_ms_.begin(), generate_ms_.end());
  const std::vector<double> serving(serve_ms_.begin(), serve_ms_.end());
  const double uptime = std::chrono::duration<double>(now - started_).count();
  return std::string("{\"status\": ") + (failure_.empty() ? "\"ok\"" : "\"error\"") +
         ", \"frames\": " + std::to_string(frames_) + ", \"fps\": " + json_number(fps, 4) +
         ", \"streams\": " + std::to_string(options_.streams) +
         ", \"ms_per_frame\": {\"p50\": " + json_number(median(window), 4) +
         ", \"p99\": " + json_number(percentile(window, 99), 4) +
         ", \"last\": " + json_number(window.empty() ? std::nan("") : window.back(), 4) +
         ", \"window\": " + std::to_string(window.size()) +
         "}, \"serve_ms_per_frame\": {\"p50\": " + json_number(median(serving), 4) +
         "}, \"late\": " + std::to_string(late_) + ", \"dropped\": " + std::to_string(dropped_) +
         ", \"viewers\": " + std::to_string(viewers) +
         ", \"max_viewers\": " + std::to_string(max_viewers) +
         ", \"target_fps\": " + json_number(options_.target_fps) +
         ", \"model\": " + io::json_quote(model_name_) +
         ", \"precision\": " + io::json_quote(precision_name_) +
         ", \"kernel_level\": " + io::json_quote(isa_name(active_isa())) +
         ", \"steps\": " + std::to_string(settings_.steps) +
         ", \"direct\": " + (info_.prediction == models::Prediction::Direct ? "true" : "false") +
         ", \"context_noise\": " + json_number(settings_.context_noise) +
         ", \"start_video\": " + std::to_string(settings_.start_video) +
         ", \"seed\": " + std::to_string(settings_.seed) +
         ", \"paused\": " + (settings_.paused ? "true" : "false") +
         ", \"uptime_s\": " + json_number(uptime, 4) +
         ", \"recent_ms\": " + json_list(generate_ms_, kChartFrames) +
         ", \"error\": " + (failure_.empty() ? "null" : io::json_quote(failure_)) + "}";
}

}  // namespace mixprec::app
