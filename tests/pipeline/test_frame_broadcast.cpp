// The live view's fan-out: viewers get the newest frame, a slow one skips frames for itself
// only, the producer never waits, and seats are bounded and given back.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "mixprec/pipeline/frame_broadcast.h"

namespace mixprec::pipeline {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<const EncodedFrames> frame(int64_t index) {
  return std::make_shared<const EncodedFrames>(
      EncodedFrames{index, {"frame " + std::to_string(index)}});
}

TEST(FrameBroadcast, ASlowViewerSkipsFramesForItselfOnly) {
  FrameBroadcast broadcast;
  EXPECT_EQ(broadcast.wait_newer(0, milliseconds(1)).frames, nullptr);  // nothing yet
  broadcast.publish(frame(0));
  const auto fast = broadcast.wait_newer(0, milliseconds(0));
  ASSERT_NE(fast.frames, nullptr);
  EXPECT_EQ(fast.sequence, 1u);
  EXPECT_EQ(fast.skipped, 0u);
  // Four more frames while this viewer was busy: it gets the newest and counts three skipped.
  for (int64_t i = 1; i <= 4; ++i) broadcast.publish(frame(i));
  const auto slow = broadcast.wait_newer(fast.sequence, milliseconds(0));
  EXPECT_EQ(slow.frames->index, 4);
  EXPECT_EQ(slow.skipped, 3u);
  // A viewer that keeps up skips none, and one with nothing newer waits and gets nothing.
  broadcast.publish(frame(5));
  EXPECT_EQ(broadcast.wait_newer(slow.sequence, milliseconds(0)).skipped, 0u);
  EXPECT_EQ(broadcast.wait_newer(6, milliseconds(1)).frames, nullptr);
  // The slow viewer's frame stays valid after the broadcast moved on (it owns a reference).
  EXPECT_EQ(slow.frames->jpeg[0], "frame 4");
}

TEST(FrameBroadcast, WakesAWaitingViewerAndClosesForEveryone) {
  FrameBroadcast broadcast;
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    broadcast.publish(frame(7));
  });
  const auto got = broadcast.wait_newer(0, milliseconds(5000));
  producer.join();
  ASSERT_NE(got.frames, nullptr);
  EXPECT_EQ(got.frames->index, 7);
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    broadcast.close();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(broadcast.wait_newer(got.sequence, milliseconds(5000)).frames, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(4000));
  closer.join();
  EXPECT_TRUE(broadcast.closed());
  broadcast.publish(frame(8));  // after close: viewers still get nothing
  EXPECT_EQ(broadcast.wait_newer(0, milliseconds(0)).frames, nullptr);
}

// One producer, viewers of different speeds: each sees frames in order, and what it received
// plus what it skipped is every frame published after its first.
TEST(FrameBroadcast, ViewersOfAnySpeedAccountForEveryFrame) {
  FrameBroadcast broadcast;
  constexpr int64_t kFrames = 2000;
  struct Count {
    uint64_t first = 0, received = 0, skipped = 0;
    std::atomic<uint64_t> last{0};
    bool in_order = true;
  };
  std::array<Count, 4> counts;
  std::vector<std::thread> viewers;
  for (std::size_t v = 0; v < counts.size(); ++v)
    viewers.emplace_back([&, v] {
      Count& c = counts[v];
      while (true) {
        const auto d = broadcast.wait_newer(c.last, milliseconds(1000));
        if (!d.frames) return;  // closed
        c.in_order = c.in_order && d.sequence > c.last &&
                     d.frames->index == static_cast<int64_t>(d.sequence) - 1;
        if (c.first == 0) c.first = d.sequence;
        c.last = d.sequence;
        ++c.received;
        c.skipped += d.skipped;
        if (v > 0) std::this_thread::sleep_for(std::chrono::microseconds(50 * v * v));
      }
    });
  for (int64_t i = 0; i < kFrames; ++i) {
    broadcast.publish(frame(i));
    if (i % 100 == 0) std::this_thread::sleep_for(milliseconds(1));
  }
  // Everyone reaches the last frame (bounded: a stuck viewer fails below instead of hanging).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const Count& c : counts)
    while (c.last != static_cast<uint64_t>(kFrames) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
  broadcast.close();
  for (std::thread& t : viewers) t.join();
  for (const Count& c : counts) {
    EXPECT_TRUE(c.in_order);
    EXPECT_EQ(c.last, static_cast<uint64_t>(kFrames));
    EXPECT_EQ(c.received + c.skipped, c.last - c.first + 1);
  }
  EXPECT_GT(counts[3].skipped, 0u);  // the slowest viewer could not keep up
}

TEST(ViewerSeats, RefusesBeyondTheLimitAndTakesSeatsBack) {
  ViewerSeats seats(2);
  auto a = seats.join();
  auto b = seats.join();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(seats.join());
  EXPECT_EQ(seats.taken(), 2);
  a.reset();
  EXPECT_EQ(seats.taken(), 1);
  auto c = seats.join();
  EXPECT_TRUE(c);
  EXPECT_EQ(seats.taken(), 2);
}

}  // namespace
}  // namespace mixprec::pipeline
