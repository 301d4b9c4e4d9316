// The streaming pipeline's parts: the bounded queue that carries backpressure, and the
// reader -> batcher/finder -> writer pipeline whose counters must always balance.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

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
