#pragma once
// Detector frames over ZeroMQ: a PUSH sender and a PULL receiver speaking the wire format of
// frame_message.h. PUSH/PULL is the pattern for this job: the sender blocks when every peer's
// queue is at its high-water mark (backpressure reaches the producer), and several receivers
// connected to one sender share its frames round-robin, each frame to exactly one of them.
//
// Memory stays bounded: each side queues at most `high_water_mark` messages (frames) per peer,
// plus what the operating system's socket buffers hold. ZeroMQ's default of 1000 would be
// 1000 frames (500 MiB of ePix10k2M frames), so the default here is 8.
//
// Both classes are RAII over libzmq's C API (context, socket, messages); neither is
// thread-safe: use one object from one thread, as ZeroMQ sockets require.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "mixprec/pipeline/frame_message.h"

namespace mixprec::pipeline {

struct ZmqOptions {
  bool bind = false;        // bind the endpoint (else connect to it)
  int high_water_mark = 8;  // messages queued per peer on this side
  // How long closing a sender waits to deliver what is still queued (a receiver that went away
  // must not hang the producer forever).
  std::chrono::milliseconds linger{10000};
};

// Called while a send or receive waits: true stops the wait (a signal, a deadline).
using StopRequested = std::function<bool()>;

class ZmqFrameSender {
 public:
  // Error naming the endpoint and ZeroMQ's reason when it cannot bind or connect.
  ZmqFrameSender(const std::string& endpoint, ZmqOptions options = {});
  ~ZmqFrameSender();
  ZmqFrameSender(const ZmqFrameSender&) = delete;
  ZmqFrameSender& operator=(const ZmqFrameSender&) = delete;

  // Connects to one more consumer's endpoint: frames are dealt round-robin among all of them.
  void connect(const std::string& endpoint);
  // The endpoint as bound ("tcp://127.0.0.1:*" becomes the port the system chose), or the
  // last one connected to.
  std::string endpoint() const;
  // Sends a frame ([header, data], data.size() == header.data_bytes). Waits while every peer is
  // at its high-water mark (or, bound, while no peer is connected); false when `stop` said so
  // before the frame could be queued.
  bool send_frame(const FrameHeader& header, std::span<const std::byte> data,
                  const StopRequested& stop);
  // An end-of-stream message ([header]); same waiting rule.
  bool send_end(int64_t frames_sent, const StopRequested& stop);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ZmqFrameReceiver {
 public:
  ZmqFrameReceiver(const std::string& endpoint, ZmqOptions options = {});
  ~ZmqFrameReceiver();
  ZmqFrameReceiver(const ZmqFrameReceiver&) = delete;
  ZmqFrameReceiver& operator=(const ZmqFrameReceiver&) = delete;

  std::string endpoint() const;

  enum class Event {
    Frame,      // header() and data() describe it, until the next receive()
    End,        // header().index is the number of frames its producer sent
    Malformed,  // a message that is not a frame or an end: error() says why; it was discarded
    Timeout,    // nothing arrived within the timeout
  };
  // Waits up to `timeout` for one whole message (all its parts). Never throws for what a peer
  // sent: a bad message is Event::Malformed. Error only for a failing socket.
  Event receive(std::chrono::milliseconds timeout);
  const FrameHeader& header() const;
  std::span<const std::byte> data() const;  // the last frame's samples (in the message buffer)
  const std::string& error() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// CLOCK_REALTIME in ns: the send stamp a receiver on the same machine can compare.
int64_t wall_clock_ns();

}  // namespace mixprec::pipeline
