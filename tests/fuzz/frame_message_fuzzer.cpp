// libFuzzer target for the ZeroMQ frame header parser (pipeline/frame_message.h; see run.sh).
// Every input must either be refused with mixprec::Error or parse into a header that keeps the
// format's promises: sides and element count in range, the data size equal to the shape times
// the sample size, an end message without shape or data, and encoding it again gives back the
// very bytes that were parsed (the format has one spelling per header).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "mixprec/core/error.h"
#include "mixprec/pipeline/frame_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mixprec::pipeline;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const FrameHeader h = parse_frame_header(bytes);
    if (size != kFrameHeaderBytes || h.index < 0) std::abort();
    if (h.kind == MessageKind::Frame) {
      if (h.panels < 1 || h.rows < 1 || h.cols < 1 || h.elements() > kMaxFrameElements)
        std::abort();
      if (h.data_bytes == 0 || h.data_bytes % static_cast<uint64_t>(h.elements()) != 0)
        std::abort();
    } else if (h.kind == MessageKind::End) {
      if (h.panels != 0 || h.rows != 0 || h.cols != 0 || h.data_bytes != 0) std::abort();
    } else {
      std::abort();
    }
    const auto again = encode_frame_header(h);
    if (std::memcmp(again.data(), data, kFrameHeaderBytes) != 0) std::abort();
    // The parts check takes any sizes without reading anything.
    const std::size_t parts[2] = {static_cast<std::size_t>(h.data_bytes), 1};
    try {
      check_message_parts(h, std::span(parts, h.kind == MessageKind::Frame ? 1 : 0));
    } catch (const mixprec::Error&) {
      std::abort();  // the sizes the header itself declares must be accepted
    }
  } catch (const mixprec::Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  return 0;
}
