#include "mixprec/pipeline/peak_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "mixprec/core/error.h"
#include "mixprec/pipeline/bounded_queue.h"

namespace mixprec::pipeline {

Tensor stack_frames(const std::vector<DetectorFrame>& batch) {
  MIXPREC_CHECK(!batch.empty(), "[pipeline] an empty batch");
  const Tensor& first = batch.front().data;
  MIXPREC_CHECK(first.dim() == 3 && first.is_contiguous(), "[pipeline] frames must be contiguous [P, H, W]");
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(batch.size()));
  if (batch.size() == 1) return first.view(shape);
  Tensor out = Tensor::empty(shape, first.dtype());
  const std::size_t bytes = static_cast<std::size_t>(first.numel()) * dtype_size(first.dtype());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Tensor& f = batch[i].data;
    MIXPREC_CHECK(f.shape() == first.shape() && f.dtype() == first.dtype() && f.is_contiguous(),
                  "[pipeline] the frames of a batch differ in shape or dtype");
    std::memcpy(static_cast<std::byte*>(out.data_ptr()) + i * bytes, f.data_ptr(), bytes);
  }
  return out;
}

OverloadPolicy parse_overload_policy(const std::string& name) {
  if (name == "block") return OverloadPolicy::Block;
  if (name == "drop") return OverloadPolicy::Drop;
  throw Error("[pipeline] unknown overload policy '" + name + "', expected block|drop");
}

const char* overload_policy_name(OverloadPolicy policy) {
  return policy == OverloadPolicy::Block ? "block" : "drop";
}

void LatencyHistogram::add(double ms) {
  const double bin = ms > kMin ? std::ceil(std::log(ms / kMin) / std::log(kGrowth)) : 0.0;
  ++bins_[static_cast<std::size_t>(std::clamp(bin, 0.0, double(kBins - 1)))];
  ++count_;
  max_ = std::max(max_, ms);
}

double LatencyHistogram::percentile(double p) const {
  if (count_ == 0) return 0;
  // Nearest rank: the smallest value with at least p% of the samples at or below it.
  const auto rank = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::clamp(p, 0.0, 100.0) / 100 * double(count_))));
  int64_t seen = 0;
  for (int b = 0; b < kBins; ++b) {
    seen += bins_[static_cast<std::size_t>(b)];
    if (seen >= rank) return std::min(max_, kMin * std::pow(kGrowth, b));
  }
  return max_;
}

PeakPipeline::PeakPipeline(Source source, Finder finder, Sink sink, PipelineOptions options)
    : source_(std::move(source)),
      finder_(std::move(finder)),
      sink_(std::move(sink)),
      options_(options) {
  MIXPREC_CHECK(options.max_batch >= 1 && options.queue_frames >= 1 &&
                    options.max_delay.count() >= 0,
                "[PeakPipeline] max_batch and queue_frames must be >= 1, max_delay >= 0");
}

PipelineCounters PeakPipeline::counters() const {
  // processed and dropped before received: a frame counted in one of them was received first,
  // so the snapshot never shows more frames leaving than arrived.
  PipelineCounters c;
  c.processed = processed_.load();
  c.dropped = dropped_.load();
  c.batches = batches_.load();
  c.queued = queued_.load();
  c.received = received_.load();
  return c;
}

PipelineSummary PeakPipeline::run() {
  using clock = std::chrono::steady_clock;
  struct Result {
    DetectorFrame frame;
    std::vector<stream::Peak> peaks;
  };
  const auto capacity = static_cast<std::size_t>(options_.queue_frames);
  BoundedQueue<DetectorFrame> frames(capacity);
  BoundedQueue<Result> results(capacity);
  std::mutex error_mutex;
  std::exception_ptr error;
  // The first failure wins; every queue closes so the other stages end instead of waiting.
  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard lock(error_mutex);
      if (!error) error = e;
    }
    stop_.store(true);
    frames.close();
    results.close();
  };

  const auto start = clock::now();
  std::thread reader([&] {
    try {
      while (!stop_.load()) {
        std::optional<DetectorFrame> frame = source_();
        if (!frame) break;
        frame->received = clock::now();
        received_.fetch_add(1);
        const bool accepted = options_.overload == OverloadPolicy::Block
                                  ? frames.push(std::move(*frame))
                                  : frames.try_push(*frame);
        if (accepted) {
          queued_.store(static_cast<int64_t>(frames.size()));
        } else {
          dropped_.fetch_add(1);  // overload (Drop), or a stage failed and closed the queue
        }
      }
      frames.close();
    } catch (...) {
      fail(std::current_exception());
    }
  });
  std::thread inference([&] {
    try {
      const auto max_batch = static_cast<std::size_t>(options_.max_batch);
      while (true) {
        std::vector<DetectorFrame> batch = frames.pop_batch(max_batch, options_.max_delay);
        if (batch.empty()) break;
        queued_.store(static_cast<int64_t>(frames.size()));
        std::vector<std::vector<stream::Peak>> peaks = finder_(batch);
        MIXPREC_CHECK(peaks.size() == batch.size(), "[PeakPipeline] the finder returned ",
                      peaks.size(), " peak lists for ", batch.size(), " frames");
        batches_.fetch_add(1);
        for (std::size_t i = 0; i < batch.size(); ++i)
          if (!results.push({std::move(batch[i]), std::move(peaks[i])})) break;
      }
      results.close();
    } catch (...) {
      fail(std::current_exception());
    }
  });

  PipelineSummary summary;
  try {
    while (std::optional<Result> result = results.pop()) {
      sink_(result->frame, result->peaks);
      summary.latency_ms.add(
          std::chrono::duration<double, std::milli>(clock::now() - result->frame.received).count());
      processed_.fetch_add(1);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  reader.join();
  inference.join();
  summary.seconds = std::chrono::duration<double>(clock::now() - start).count();
  summary.counters = counters();
  summary.counters.queued = 0;
  if (error) std::rethrow_exception(error);
  summary.mean_batch = summary.counters.batches > 0
                           ? static_cast<double>(summary.counters.processed) /
                                 static_cast<double>(summary.counters.batches)
                           : 0;
  return summary;
}

}  // namespace mixprec::pipeline
