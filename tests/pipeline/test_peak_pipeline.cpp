// The streaming pipeline's parts: the bounded queue that carries backpressure, and the
// reader -> batcher/finder -> writer pipeline whose counters must always balance.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mixprec/core/allocator.h"
#include "mixprec/pipeline/bounded_queue.h"
#include "mixprec/pipeline/peak_pipeline.h"

namespace mixprec::pipeline {
namespace {

using namespace std::chrono_literals;

TEST(BoundedQueue, KeepsOrderRefusesWhenFullAndDrainsAfterClose) {
  BoundedQueue<int> q(2);
  EXPECT_TRUE(q.push(1));
  int two = 2, three = 3;
  EXPECT_TRUE(q.try_push(two));
  EXPECT_FALSE(q.try_push(three));  // full: refused, the item is left to the caller
  EXPECT_EQ(three, 3);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(*q.pop(), 1);
  q.close();
  EXPECT_FALSE(q.push(4));          // closed: nothing more goes in...
  EXPECT_EQ(*q.pop(), 2);           // ...but what is queued comes out
  EXPECT_FALSE(q.pop().has_value());
  EXPECT_TRUE(q.pop_batch(4, 1ms).empty());
}

TEST(BoundedQueue, ABatchTakesWhatIsThereUpToItsSizeAndAPartialOneWhenTheDelayRunsOut) {
  BoundedQueue<int> q(8);
  for (int i = 0; i < 5; ++i) q.push(i);
  EXPECT_EQ(q.pop_batch(3, 1s), (std::vector<int>{0, 1, 2}));  // full at once: no waiting
  EXPECT_EQ(q.pop_batch(3, 1ms), (std::vector<int>{3, 4}));    // partial after the delay
  // A push while the batcher waits joins the batch.
  std::thread late([&] {
    std::this_thread::sleep_for(20ms);
    q.push(6);
  });
  q.push(5);
  EXPECT_EQ(q.pop_batch(2, 10s), (std::vector<int>{5, 6}));
  late.join();
}

TEST(BoundedQueue, APushWaitsForRoom) {
  BoundedQueue<int> q(1);
  q.push(1);
  std::thread consumer([&] {
    std::this_thread::sleep_for(20ms);
    q.pop();
  });
  EXPECT_TRUE(q.push(2));  // returns once the consumer made room
  consumer.join();
  EXPECT_EQ(*q.pop(), 2);
}

TEST(LatencyHistogram, PercentilesWithinFivePercentInFixedMemory) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile(50), 0);
  for (int i = 1; i <= 1000; ++i) h.add(i * 0.1);  // 0.1 .. 100 ms
  EXPECT_EQ(h.count(), 1000);
  EXPECT_DOUBLE_EQ(h.max(), 100.0);
  for (const double p : {1.0, 50.0, 99.0}) {
    const double exact = p * 0.1 * 10;  // the nearest-rank value: rank 10 p, value rank * 0.1
    EXPECT_GE(h.percentile(p), exact * 0.999) << p;
    EXPECT_LE(h.percentile(p), exact * 1.05) << p;
  }
  EXPECT_DOUBLE_EQ(h.percentile(100), 100.0);
  h.add(0);      // below the first bin
  h.add(1e9);    // beyond the last
  EXPECT_EQ(h.count(), 1002);
  EXPECT_DOUBLE_EQ(h.max(), 1e9);
}

// A source of `n` frames (ids 0..n-1) and a finder that reports one peak at x = id per frame.
PeakPipeline::Source frames_source(int64_t n) {
  auto next = std::make_shared<int64_t>(0);
  return [next, n]() -> std::optional<DetectorFrame> {
    if (*next >= n) return std::nullopt;
    return DetectorFrame{.id = (*next)++, .data = Tensor::zeros({1, 2, 2})};
  };
}

std::vector<std::vector<stream::Peak>> one_peak_each(const std::vector<DetectorFrame>& batch) {
  std::vector<std::vector<stream::Peak>> out;
  for (const DetectorFrame& f : batch) out.push_back({stream::Peak{.x = static_cast<float>(f.id)}});
  return out;
}

TEST(PeakPipeline, EveryFrameReachesTheSinkInOrderInBatchesNoLargerThanAsked) {
  std::vector<int64_t> seen;
  int64_t largest = 0;
  PeakPipeline pipe(
      frames_source(100),
      [&](const std::vector<DetectorFrame>& batch) {
        largest = std::max<int64_t>(largest, static_cast<int64_t>(batch.size()));
        return one_peak_each(batch);
      },
      [&](const DetectorFrame& f, const std::vector<stream::Peak>& peaks) {
        ASSERT_EQ(peaks.size(), 1u);
        EXPECT_EQ(peaks[0].x, static_cast<float>(f.id));  // each frame gets its own peaks
        seen.push_back(f.id);
      },
      {.max_batch = 8, .max_delay = 2ms, .queue_frames = 4});
  const PipelineSummary s = pipe.run();
  ASSERT_EQ(seen.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
  EXPECT_LE(largest, 8);
  EXPECT_EQ(s.counters.received, 100);
  EXPECT_EQ(s.counters.processed, 100);
  EXPECT_EQ(s.counters.dropped, 0);
  EXPECT_EQ(s.counters.in_flight(), 0);
  EXPECT_GE(s.counters.batches, 100 / 8);
  EXPECT_EQ(s.latency_ms.count(), 100);
  EXPECT_LE(s.latency_ms.percentile(50), s.latency_ms.percentile(99));
  EXPECT_LE(s.latency_ms.percentile(99), s.latency_ms.max());
}

// A finder slower than the source: Block makes the reader wait and loses nothing; Drop keeps the
// reader at its pace, drops frames and counts every one.
TEST(PeakPipeline, OverloadBlocksOrDropsAndTheCountersBalance) {
  for (const OverloadPolicy policy : {OverloadPolicy::Block, OverloadPolicy::Drop}) {
    std::vector<int64_t> seen;
    PeakPipeline pipe(
        frames_source(60),
        [](const std::vector<DetectorFrame>& batch) {
          std::this_thread::sleep_for(3ms);
          return one_peak_each(batch);
        },
        [&](const DetectorFrame& f, const std::vector<stream::Peak>&) { seen.push_back(f.id); },
        {.max_batch = 1, .max_delay = 0ms, .queue_frames = 2, .overload = policy});
    const PipelineSummary s = pipe.run();
    SCOPED_TRACE(overload_policy_name(policy));
    EXPECT_EQ(s.counters.received, 60);
    EXPECT_EQ(s.counters.processed + s.counters.dropped, 60);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), s.counters.processed);
    for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_LT(seen[i - 1], seen[i]);
    if (policy == OverloadPolicy::Block) {
      EXPECT_EQ(s.counters.dropped, 0);
    } else {
      EXPECT_GT(s.counters.dropped, 0);
    }
  }
}

// The overload test, bounded in time: a detector paced at twice what the finder can take
// (500 frames/s of 1 MiB into a finder of 250 frames/s) for 1.2 s. With Drop the reader keeps
// the detector's pace and about half the frames are dropped; with Block the detector is held
// back and nothing is lost. In both, sampled every 2 ms while it runs: the frames in flight
// never exceed what the queues, the batch and the two stages in hand can hold, the engine's
// tensor memory stays within that many frames, and at the end the counters balance with
// nothing in flight.
TEST(PeakPipeline, TwiceTheCapacityForAWhileKeepsMemoryBoundedAndTheCountersBalanced) {
  constexpr int64_t kFrames = 600, kQueue = 4, kBatch = 2;
  constexpr double kRate = 500;                 // frames/s in
  constexpr auto kFinderTime = 8ms;             // per batch of 2: 250 frames/s out
  const Shape shape = {1, 512, 512};            // f32: 1 MiB a frame
  const double frame_bytes = 512.0 * 512.0 * 4.0;
  // Queued frames (2 queues), a batch in the finder, one frame in the reader's and one in the
  // writer's hands.
  constexpr int64_t kMaxInFlight = 2 * kQueue + kBatch + 2;
  for (const OverloadPolicy policy : {OverloadPolicy::Drop, OverloadPolicy::Block}) {
    SCOPED_TRACE(overload_policy_name(policy));
    const std::size_t baseline = CachingAllocator::global().stats().allocated_bytes;
    const auto start = std::chrono::steady_clock::now();
    int64_t next = 0;
    auto paced = [&]() -> std::optional<DetectorFrame> {
      if (next >= kFrames) return std::nullopt;
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(static_cast<double>(next) / kRate)));
      return DetectorFrame{.id = next++, .data = Tensor::zeros(shape)};
    };
    int64_t written = 0;
    PeakPipeline pipe(
        paced,
        [&](const std::vector<DetectorFrame>& batch) {
          std::this_thread::sleep_for(kFinderTime);
          return one_peak_each(batch);
        },
        [&](const DetectorFrame&, const std::vector<stream::Peak>&) { ++written; },
        {.max_batch = kBatch, .max_delay = 1ms, .queue_frames = kQueue, .overload = policy});
    std::atomic<bool> done{false};
    int64_t most_in_flight = 0, samples = 0;
    double most_bytes = 0;
    std::thread monitor([&] {
      while (!done.load()) {
        const PipelineCounters c = pipe.counters();
        most_in_flight = std::max(most_in_flight, c.in_flight());
        const std::size_t now = CachingAllocator::global().stats().allocated_bytes;
        most_bytes = std::max(most_bytes, static_cast<double>(now) - static_cast<double>(baseline));
        ++samples;
        std::this_thread::sleep_for(2ms);
      }
    });
    const PipelineSummary s = pipe.run();
    done.store(true);
    monitor.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ overload ] %s: %lld received, %lld processed, %lld dropped in %.2f s; at most %lld "
                "frames in flight, %.1f MiB of tensors (%lld samples)\n",
                overload_policy_name(policy), static_cast<long long>(s.counters.received),
                static_cast<long long>(s.counters.processed), static_cast<long long>(s.counters.dropped),
                seconds, static_cast<long long>(most_in_flight), most_bytes / 1048576.0,
                static_cast<long long>(samples));
    EXPECT_GT(samples, 100);
    EXPECT_LE(most_in_flight, kMaxInFlight);
    EXPECT_LE(most_bytes, (kMaxInFlight + 1) * frame_bytes);
    EXPECT_EQ(s.counters.received, kFrames);
    EXPECT_EQ(s.counters.processed + s.counters.dropped, kFrames);
    EXPECT_EQ(s.counters.in_flight(), 0);
    EXPECT_EQ(written, s.counters.processed);
    if (policy == OverloadPolicy::Drop) {
      EXPECT_GT(s.counters.dropped, kFrames / 4);  // about half; the finder's sleeps run long
      EXPECT_LT(seconds, 1.2 * 1.5);              // the detector's pace, not the finder's
    } else {
      EXPECT_EQ(s.counters.dropped, 0);
      EXPECT_GT(seconds, 1.2 * 1.5);  // held back to the finder's 250 frames/s: 2.4 s
    }
  }
}

TEST(PeakPipeline, AFailingStageStopsTheOthersAndItsErrorComesOut) {
  PeakPipeline throwing(
      frames_source(1000000),
      [](const std::vector<DetectorFrame>& batch) {
        if (batch.front().id >= 10) throw std::runtime_error("finder broke at frame 10");
        return one_peak_each(batch);
      },
      [](const DetectorFrame&, const std::vector<stream::Peak>&) {},
      {.max_batch = 1, .queue_frames = 4});
  EXPECT_THROW(
      {
        try {
          throwing.run();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "finder broke at frame 10");
          throw;
        }
      },
      std::runtime_error);
  PeakPipeline wrong_count(
      frames_source(3), [](const std::vector<DetectorFrame>&) {
        return std::vector<std::vector<stream::Peak>>{};
      },
      [](const DetectorFrame&, const std::vector<stream::Peak>&) {}, {});
  EXPECT_THROW(wrong_count.run(), Error);
  EXPECT_EQ(parse_overload_policy("drop"), OverloadPolicy::Drop);
  EXPECT_THROW(parse_overload_policy("spill"), Error);
}

}  // namespace
}  // namespace mixprec::pipeline
