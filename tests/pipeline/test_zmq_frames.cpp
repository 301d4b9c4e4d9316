// Frames over ZeroMQ (pipeline/zmq_frames.h) on loopback TCP: what is sent arrives whole, bad
// messages from a raw peer are reported and skipped without losing the good ones, a sender
// waits at the high-water mark, and two receivers share one sender's frames exactly once.
#include <gtest/gtest.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/pipeline/zmq_frames.h"

namespace mixprec::pipeline {
namespace {

using namespace std::chrono_literals;
using Event = ZmqFrameReceiver::Event;
using stream::SampleType;

// Waits (up to tries x 100 ms) for the next event that is not a timeout (a failed test rather
// than a hang).
Event next_event(ZmqFrameReceiver& r, int tries = 100) {
  for (int i = 0; i < tries; ++i) {
    const Event e = r.receive(100ms);
    if (e != Event::Timeout) return e;
  }
  return Event::Timeout;
}

const StopRequested kNever = [] { return false; };

TEST(ZmqFrames, AFrameAndTheEndArriveWhole) {
  ZmqFrameReceiver receiver("tcp://127.0.0.1:*", {.bind = true});
  ASSERT_EQ(receiver.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << receiver.endpoint();
  ZmqFrameSender sender(receiver.endpoint());
  std::vector<uint16_t> samples(2 * 3 * 5);
  for (std::size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<uint16_t>(1000 + 7 * i);
  ASSERT_TRUE(sender.send_frame(frame_header(42, SampleType::U16, 2, 3, 5, wall_clock_ns()),
                                std::as_bytes(std::span(samples)), kNever));
  ASSERT_TRUE(sender.send_end(1, kNever));

  ASSERT_EQ(next_event(receiver), Event::Frame);
  EXPECT_EQ(receiver.header().index, 42);
  EXPECT_EQ(receiver.header().panels, 2);
  EXPECT_GT(receiver.header().sent_ns, 0);
  ASSERT_EQ(receiver.data().size(), samples.size() * 2);
  EXPECT_EQ(std::memcmp(receiver.data().data(), samples.data(), receiver.data().size()), 0);
  ASSERT_EQ(next_event(receiver), Event::End);
  EXPECT_EQ(receiver.header().index, 1);
}

TEST(ZmqFrames, MalformedMessagesAreReportedAndSkipped) {
  ZmqFrameReceiver receiver("tcp://127.0.0.1:*", {.bind = true});
  // A raw PUSH peer that sends what no mixprec sender would.
  void* ctx = zmq_ctx_new();
  void* push = zmq_socket(ctx, ZMQ_PUSH);
  const int linger = 1000;
  zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
  ASSERT_EQ(zmq_connect(push, receiver.endpoint().c_str()), 0);
  const auto header = encode_frame_header(frame_header(5, SampleType::U16, 1, 2, 2));
  const std::vector<uint16_t> four(4, 9);
  auto send = [&](const void* data, std::size_t n, int flags) {
    ASSERT_GE(zmq_send(push, data, n, flags), 0) << zmq_strerror(zmq_errno());
  };
  send("hello", 5, 0);                              // 1: not a header
  send(header.data(), header.size(), 0);            // 2: a frame header without data
  send(header.data(), header.size(), ZMQ_SNDMORE);  // 3: data one sample short
  send(four.data(), 6, 0);
  send(header.data(), header.size(), ZMQ_SNDMORE);  // 4: an extra part
  send(four.data(), 8, ZMQ_SNDMORE);
  send(four.data(), 8, 0);
  send(header.data(), header.size(), ZMQ_SNDMORE);  // then a good frame
  send(four.data(), 8, 0);

  const char* reasons[] = {"header is 5 bytes", "0 parts after the header", "6 data bytes",
                           "2 parts after the header"};
  for (const char* reason : reasons) {
    ASSERT_EQ(next_event(receiver), Event::Malformed) << reason;
    EXPECT_NE(receiver.error().find(reason), std::string::npos) << receiver.error();
  }
  ASSERT_EQ(next_event(receiver), Event::Frame);  // the good frame survived the bad ones
  EXPECT_EQ(receiver.header().index, 5);
  EXPECT_EQ(receiver.data().size(), 8u);
  zmq_close(push);
  zmq_ctx_term(ctx);
}

TEST(ZmqFrames, TheSenderWaitsAtTheHighWaterMark) {
  // Nobody reads: the sender queues a bounded number of 1 MiB frames (its high-water mark,
  // the receiver's, the kernel's socket buffers), then waits until told to stop.
  ZmqFrameReceiver receiver("tcp://127.0.0.1:*", {.bind = true, .high_water_mark = 1});
  ZmqFrameSender sender(receiver.endpoint(), {.high_water_mark = 1, .linger = 0ms});
  const std::vector<std::byte> megabyte(512 * 512 * 4);
  int sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + 1500ms;
  const StopRequested until_deadline = [&] { return std::chrono::steady_clock::now() > deadline; };
  while (sent < 200 && sender.send_frame(frame_header(sent, SampleType::F32, 1, 512, 512), megabyte,
                                         until_deadline))
    ++sent;
  EXPECT_LT(sent, 40) << "the sender should have been held back";
  EXPECT_GE(sent, 1);
}

TEST(ZmqFrames, TwoReceiversShareTheFramesExactlyOnce) {
  ZmqFrameReceiver a("tcp://127.0.0.1:*", {.bind = true});
  ZmqFrameReceiver b("tcp://127.0.0.1:*", {.bind = true});
  ZmqFrameSender sender(a.endpoint());
  sender.connect(b.endpoint());
  constexpr int kFrames = 40;
  // Until an end message, or 2 s of silence: PUSH hands an end to a peer with room, so one
  // receiver may get both ends and the other none (docs/STREAM.md, "Ending").
  auto drain = [](ZmqFrameReceiver& r, std::vector<int64_t>& ids) {
    while (true) {
      const Event e = next_event(r, 20);
      if (e == Event::Frame) ids.push_back(r.header().index);
      if (e != Event::Frame) return;
    }
  };
  std::vector<int64_t> got_a, got_b;
  std::thread ta([&] { drain(a, got_a); });
  std::thread tb([&] { drain(b, got_b); });
  const std::vector<float> sample(16, 1.0f);
  for (int i = 0; i < kFrames; ++i)
    ASSERT_TRUE(sender.send_frame(frame_header(i, SampleType::F32, 1, 4, 4),
                                  std::as_bytes(std::span(sample)), kNever));
  ASSERT_TRUE(sender.send_end(kFrames, kNever));
  ASSERT_TRUE(sender.send_end(kFrames, kNever));
  ta.join();
  tb.join();
  EXPECT_FALSE(got_a.empty());
  EXPECT_FALSE(got_b.empty());
  std::set<int64_t> all(got_a.begin(), got_a.end());
  all.insert(got_b.begin(), got_b.end());
  EXPECT_EQ(got_a.size() + got_b.size(), static_cast<std::size_t>(kFrames));  // none twice
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kFrames));                   // none lost
}

TEST(ZmqFrames, ABadEndpointIsAClearError) {
  try {
    ZmqFrameReceiver r("tcp://no-such-host-really:5555x", {.bind = true});
    FAIL() << "bound a bad endpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot bind 'tcp://no-such-host-really:5555x'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ZmqFrameSender("nonsense://x"), Error);
}

}  // namespace
}  // namespace mixprec::pipeline
