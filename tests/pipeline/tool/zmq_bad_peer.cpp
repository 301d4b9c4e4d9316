// A hostile (or broken) producer for the command-line tests: connects a raw ZeroMQ PUSH socket
// to ENDPOINT and sends what no mixprec sender would, then good frames and an end message, so
// a `stream run --zmq` worker can be checked to count and report the bad messages, keep
// going, and process the good frames.
//
//   zmq_bad_peer ENDPOINT PANELS ROWS COLS GOOD_FRAMES
//
// The bad messages, in order: a part that is not a header, a frame header without its data,
// a frame whose data is one byte short, a frame with an extra part, a header of version 2.
#include <zmq.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mixprec/pipeline/frame_message.h"

namespace {

using namespace mixprec::pipeline;

void send(void* socket, const void* data, std::size_t n, int flags) {
  if (zmq_send(socket, data, n, flags) < 0) {
    std::fprintf(stderr, "zmq_bad_peer: send failed: %s\n", zmq_strerror(zmq_errno()));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: zmq_bad_peer ENDPOINT PANELS ROWS COLS GOOD_FRAMES\n");
    return 2;
  }
  const int64_t panels = std::atoll(argv[2]), rows = std::atoll(argv[3]), cols = std::atoll(argv[4]);
  const int good = std::atoi(argv[5]);
  void* ctx = zmq_ctx_new();
  void* push = zmq_socket(ctx, ZMQ_PUSH);
  const int linger = 10000;  // deliver everything before closing
  zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_connect(push, argv[1]) != 0) {
    std::fprintf(stderr, "zmq_bad_peer: cannot connect to %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
    return 1;
  }
  const FrameHeader h = frame_header(0, mixprec::stream::SampleType::U16, panels, rows, cols);
  const auto header = encode_frame_header(h);
  const std::vector<std::byte> data(h.data_bytes, std::byte{0});
  send(push, "not a header", 12, 0);
  send(push, header.data(), header.size(), 0);
  send(push, header.data(), header.size(), ZMQ_SNDMORE);
  send(push, data.data(), data.size() - 1, 0);
  send(push, header.data(), header.size(), ZMQ_SNDMORE);
  send(push, data.data(), data.size(), ZMQ_SNDMORE);
  send(push, "x", 1, 0);
  auto v2 = header;
  v2[4] = std::byte{2};
  send(push, v2.data(), v2.size(), ZMQ_SNDMORE);
  send(push, data.data(), data.size(), 0);
  for (int i = 0; i < good; ++i) {
    const auto frame = encode_frame_header(frame_header(i, mixprec::stream::SampleType::U16, panels, rows, cols));
    send(push, frame.data(), frame.size(), ZMQ_SNDMORE);
    send(push, data.data(), data.size(), 0);
  }
  const auto end = encode_frame_header(end_header(good));
  send(push, end.data(), end.size(), 0);
  zmq_close(push);
  zmq_ctx_term(ctx);
  std::printf("zmq_bad_peer: sent 5 bad messages, %d frames and an end to %s\n", good, argv[1]);
  return 0;
}
