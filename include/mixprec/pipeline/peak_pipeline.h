#pragma once
// PeakPipeline: detector frames in, Bragg peaks out, on three threads joined by bounded queues
// (issue #13, docs/STREAM.md):
//
//   reader thread      source() -> a frame, converted once into the finder's dtype
//        | frames queue (queue_frames)   full: Block waits (backpressure), Drop counts it
//   inference thread   batches of up to max_batch frames, waiting at most max_delay for a batch
//        |             to fill, -> finder(batch) -> one peak list per frame
//        | results queue (queue_frames)
//   writer (caller)    sink(frame id, peaks), in arrival order
//
// The counters always balance: received = processed + dropped + in flight, and after run()
// in flight is 0. Latency is measured per frame from the moment the source handed it over to
// the moment its peaks reached the sink. An exception in any stage stops the others (their
// queues are closed), and run() rethrows the first one after every thread has ended.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/core/tensor.h"
#include "mixprec/stream/peaks.h"

namespace mixprec::pipeline {

struct DetectorFrame {
  int64_t id = 0;
  Tensor data;  // [P, H, W] in the finder's dtype
  std::chrono::steady_clock::time_point received{};
};

// A batch's frames as one tensor [B, P, H, W] in their dtype, for a network: a view of the frame
// itself for a batch of one, else one copy of each frame (in its 16-bit dtype when the frames
// were converted to bf16 at the source: no f32 on the way).
Tensor stack_frames(const std::vector<DetectorFrame>& batch);

enum class OverloadPolicy { Block, Drop };
OverloadPolicy parse_overload_policy(const std::string& name);  // "block" | "drop"
const char* overload_policy_name(OverloadPolicy policy);

struct PipelineOptions {
  int64_t max_batch = 8;
  std::chrono::microseconds max_delay{5000};
  int64_t queue_frames = 32;  // capacity of each queue, in frames
  OverloadPolicy overload = OverloadPolicy::Block;
};

// A snapshot of the counters (any thread may read them while the pipeline runs).
struct PipelineCounters {
  int64_t received = 0, processed = 0, dropped = 0, batches = 0, queued = 0;
  int64_t in_flight() const { return received - processed - dropped; }
};

// Latencies in logarithmic bins (5% wide, 1 us to 1000 s): percentiles within 5% in a fixed
// 4 KiB, however long the run.
class LatencyHistogram {
 public:
  void add(double ms);
  int64_t count() const { return count_; }
  double max() const { return max_; }
  // The upper edge of the bin holding the p-th percentile (nearest rank), p in [0, 100]; 0
  // without samples.
  double percentile(double p) const;

 private:
  static constexpr double kMin = 1e-3, kGrowth = 1.05;
  static constexpr int kBins = 520;  // kMin * kGrowth^520 > 1e6 ms
  std::vector<int64_t> bins_ = std::vector<int64_t>(kBins, 0);
  int64_t count_ = 0;
  double max_ = 0;
};

struct PipelineSummary {
  PipelineCounters counters;
  double seconds = 0;
  double mean_batch = 0;
  LatencyHistogram latency_ms;  // one sample per processed frame
};

class PeakPipeline {
 public:
  // The next frame, or nothing at the end of the input.
  using Source = std::function<std::optional<DetectorFrame>()>;
  // One peak list per frame of the batch, in order.
  using Finder = std::function<std::vector<std::vector<stream::Peak>>(
      const std::vector<DetectorFrame>& batch)>;
  using Sink = std::function<void(const DetectorFrame& frame, const std::vector<stream::Peak>&)>;

  PeakPipeline(Source source, Finder finder, Sink sink, PipelineOptions options);

  // Runs until the source ends (or a stage throws) and every accepted frame is written.
  PipelineSummary run();
  // Asks the reader to stop taking frames (thread- and signal-safe); what is queued is finished.
  void request_stop() { stop_.store(true); }
  PipelineCounters counters() const;

 private:
  Source source_;
  Finder finder_;
  Sink sink_;
  PipelineOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> received_{0}, processed_{0}, dropped_{0}, batches_{0}, queued_{0};
};

}  // namespace mixprec::pipeline
