#include "mixprec/pipeline/zmq_frames.h"

#include <cerrno>
#include <ctime>
#include <optional>
#include <vector>

#include "mixprec/core/error.h"
#include "zmq_socket.h"

namespace mixprec::pipeline {
namespace {

// Waits are cut in slices this long so that a stop request (a signal) is seen promptly.
constexpr long kSliceMs = 100;

void attach(zmq::Socket& socket, const std::string& endpoint, const ZmqOptions& options) {
  MIXPREC_CHECK(!endpoint.empty(), "[zmq] empty endpoint (expected e.g. tcp://127.0.0.1:5555)");
  MIXPREC_CHECK(options.high_water_mark >= 1, "[zmq] the high-water mark must be >= 1");
  if (options.bind)
    socket.bind(endpoint);
  else
    socket.connect(endpoint);
}

}  // namespace

int64_t wall_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ---- sender ----

struct ZmqFrameSender::Impl {
  zmq::Context context;  // declared first: destroyed last, after the socket has closed
  zmq::Socket socket{context, ZMQ_PUSH};

  // Waits until a whole message can be queued, then sends its parts. ZeroMQ takes the parts of
  // a message atomically: once the first is accepted the rest are, so only the first may wait.
  bool send(std::span<const std::byte> header, std::span<const std::byte> data, bool with_data,
            const StopRequested& stop) {
    while (true) {
      if (stop && stop()) return false;
      if (!socket.wait(ZMQ_POLLOUT, kSliceMs)) continue;
      const int flags = ZMQ_DONTWAIT | (with_data ? ZMQ_SNDMORE : 0);
      if (zmq_send(socket.get(), header.data(), header.size(), flags) >= 0) break;
      MIXPREC_CHECK(zmq_errno() == EAGAIN || zmq_errno() == EINTR,
                    "[zmq] send failed: ", zmq::last_error());
    }
    if (with_data) {
      while (zmq_send(socket.get(), data.data(), data.size(), 0) < 0)
        MIXPREC_CHECK(zmq_errno() == EINTR, "[zmq] send failed: ", zmq::last_error());
    }
    return true;
  }
};

ZmqFrameSender::ZmqFrameSender(const std::string& endpoint, ZmqOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->socket.set(ZMQ_SNDHWM, options.high_water_mark);
  impl_->socket.set(ZMQ_LINGER, static_cast<int>(options.linger.count()));
  attach(impl_->socket, endpoint, options);
}

ZmqFrameSender::~ZmqFrameSender() = default;

void ZmqFrameSender::connect(const std::string& endpoint) {
  attach(impl_->socket, endpoint, ZmqOptions{.bind = false});
}

std::string ZmqFrameSender::endpoint() const { return impl_->socket.last_endpoint(); }

bool ZmqFrameSender::send_frame(const FrameHeader& header, std::span<const std::byte> data,
                                const StopRequested& stop) {
  MIXPREC_CHECK(header.kind == MessageKind::Frame && data.size() == header.data_bytes,
                "[zmq] frame ", header.index, ": ", data.size(), " data bytes for a header of ",
                header.data_bytes);
  const auto bytes = encode_frame_header(header);
  return impl_->send(bytes, data, true, stop);
}

bool ZmqFrameSender::send_end(int64_t frames_sent, const StopRequested& stop) {
  const auto bytes = encode_frame_header(end_header(frames_sent, wall_clock_ns()));
  return impl_->send(bytes, {}, false, stop);
}

// ---- receiver ----

struct ZmqFrameReceiver::Impl {
  zmq::Context context;
  zmq::Socket socket{context, ZMQ_PULL};
  zmq::Message data;  // the last frame's data part, converted straight from its buffer
  FrameHeader header;
  std::string error;
};

ZmqFrameReceiver::ZmqFrameReceiver(const std::string& endpoint, ZmqOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->socket.set(ZMQ_RCVHWM, options.high_water_mark);
  impl_->socket.set(ZMQ_LINGER, 0);  // what is unread at close is the producer's to resend
  // A peer sending a part larger than the largest possible frame is cut off by ZeroMQ itself
  // before it is buffered (the header check would refuse it anyway).
  const int64_t max_part = kMaxFrameElements * 8;
  MIXPREC_CHECK(
      zmq_setsockopt(impl_->socket.get(), ZMQ_MAXMSGSIZE, &max_part, sizeof max_part) == 0,
      "[zmq] cannot limit the message size: ", zmq::last_error());
  attach(impl_->socket, endpoint, options);
}

ZmqFrameReceiver::~ZmqFrameReceiver() = default;

std::string ZmqFrameReceiver::endpoint() const { return impl_->socket.last_endpoint(); }

ZmqFrameReceiver::Event ZmqFrameReceiver::receive(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  if (!m.socket.wait(ZMQ_POLLIN, static_cast<long>(timeout.count()))) return Event::Timeout;
  zmq::Message head;
  if (!head.receive(m.socket)) return Event::Timeout;
  // Every part of the message is read, whatever it holds, so a bad message never leaves parts
  // behind to be mistaken for the start of the next one. ZeroMQ delivers the parts together.
  std::vector<std::size_t> part_bytes;  // the parts after the header
  bool more = head.more();
  while (more) {
    zmq::Message scratch;
    zmq::Message& part = part_bytes.empty() ? m.data : scratch;
    if (!part.receive(m.socket)) break;  // cannot happen for a whole message; stop, not spin
    part_bytes.push_back(part.size());
    more = part.more();
  }
  try {
    m.header = parse_frame_header({head.data(), head.size()});
    check_message_parts(m.header, part_bytes);
  } catch (const Error& e) {
    m.error = e.what();
    return Event::Malformed;
  }
  return m.header.kind == MessageKind::Frame ? Event::Frame : Event::End;
}

const FrameHeader& ZmqFrameReceiver::header() const { return impl_->header; }
std::span<const std::byte> ZmqFrameReceiver::data() const {
  return {impl_->data.data(), impl_->data.size()};
}
const std::string& ZmqFrameReceiver::error() const { return impl_->error; }

}  // namespace mixprec::pipeline
