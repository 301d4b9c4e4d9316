#pragma once
// The generator behind `mixprec video serve`: one thread runs a BatchedVideoStream, encodes each
// frame once as JPEG and publishes it to the viewers (pipeline::FrameBroadcast), keeps the
// figures the page shows, and applies the page's controls at the next frame boundary. Nothing
// here speaks HTTP (video_serve_http.h does).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mixprec/data/moving_shapes.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/pipeline/frame_broadcast.h"

namespace mixprec::app {

// What the page's controls change. A restart takes the start video and seed; the other settings
// carry on the running streams from the next frame.
struct LiveSettings {
  int64_t start_video = 0;  // held-out video number: 0 is the first video training never saw
  int64_t seed = 0;         // stream i draws its noise from seed + i
  int64_t steps = 4;        // DDIM steps per frame
  std::string precision = "auto";
  double context_noise = 0;
  bool paused = false;
};

// One request from the page; absent fields stay as they are.
struct ControlChange {
  bool restart = false;
  std::optional<int64_t> start_video, seed, steps;
  std::optional<std::string> precision;
  std::optional<double> context_noise;
  std::optional<bool> paused;
};

// The allowed values, checked before anything reaches the generator.
inline constexpr int64_t kMaxStartVideo = 1'000'000;
inline constexpr int64_t kMaxSeed = 1'000'000'000;
inline constexpr int64_t kMaxSteps = 50;
inline constexpr double kMaxContextNoise = 0.5;

// Request parameters -> a change, or an error message naming the parameter and its range.
// Unknown parameters are errors too: a typo must not pass silently as "no change".
struct ParsedControl {
  std::optional<ControlChange> change;
  std::string error;
};
ParsedControl parse_control(const std::multimap<std::string, std::string>& params);

struct LiveOptions {
  std::string checkpoint;
  int64_t streams = 1;
  double target_fps = 25;  // pace frames to this rate (late frames are counted); 0: free-running
  int jpeg_quality = 92;
  LiveSettings initial;
};

class LiveVideo {
 public:
  // Loads the model (errors throw here, before any thread starts).
  explicit LiveVideo(LiveOptions options);
  ~LiveVideo();  // stops the generator
  LiveVideo(const LiveVideo&) = delete;
  LiveVideo& operator=(const LiveVideo&) = delete;

  void start();
  // Finishes the frame in progress and joins the generator; viewers are woken and end.
  void stop();

  void request(const ControlChange& change);  // applied at the next frame boundary
  pipeline::FrameBroadcast& broadcast() { return broadcast_; }
  int64_t streams() const { return options_.streams; }
  void add_dropped(uint64_t frames) { dropped_ += frames; }  // frames a slow viewer skipped

  // The figures as one JSON object (the page's and scripts' source); `viewers` and
  // `max_viewers` come from the HTTP side.
  std::string figures_json(int64_t viewers, int64_t max_viewers) const;
  // Empty while healthy; the generator's error once it has stopped on one.
  std::string failure() const;
  int64_t frames() const;

 private:
  void run();
  void apply(const ControlChange& change);        // generator thread, between frames
  void load_model(const std::string& precision);  // generator thread
  // anchors: an anchor model's, kept across a precision change; empty: the first frames'.
  void restart_streams(const std::vector<Tensor>& first_frames,
                       const std::vector<Tensor>& anchors = {});
  std::vector<Tensor> start_frames() const;
  models::StreamOptions stream_options() const;
  void record(double generate_ms, double serve_ms, bool late);

  LiveOptions options_;
  pipeline::FrameBroadcast broadcast_;
  std::thread generator_;

  // Generator thread only (and the constructor, before it starts).
  models::VideoModelInfo info_;
  // The model's dataset: its held-out videos start the streams.
  std::unique_ptr<data::MovingShapes> videos_;
  std::unique_ptr<models::UNetVideo> model_;
  std::unique_ptr<models::BatchedVideoStream> stream_;
  bool autocast_ = false;
  DType autocast_dtype_ = DType::BF16;

  mutable std::mutex mutex_;  // everything below
  std::condition_variable wake_;
  bool stopping_ = false;
  // Requests since the last frame, merged into one (later values win): memory stays bounded
  // however fast controls arrive.
  std::optional<ControlChange> pending_;
  LiveSettings settings_;       // written under the lock by the generator thread only
  std::string precision_name_;  // as resolved: "auto(bf16)"
  std::string model_name_;
  int64_t frames_ = 0, late_ = 0;
  std::deque<double> generate_ms_, serve_ms_;  // the last kWindow frames
  std::deque<std::chrono::steady_clock::time_point> published_at_;
  std::string failure_;
  std::atomic<uint64_t> dropped_{0};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace mixprec::app
