#include "mixprec/pipeline/frame_message.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "mixprec/core/error.h"

namespace mixprec::pipeline {
namespace {

constexpr std::array<char, 4> kMagic{'M', 'P', 'X', 'F'};
// The wire codes of the sample types (the index here) and their sizes, fixed by the format,
// not by the enum's order. Kept here rather than asked of sample_types.cpp so the parser
// stands alone (the fuzz target builds it without the conversion kernels).
struct WireType {
  stream::SampleType type;
  uint64_t bytes;
};
constexpr std::array<WireType, 9> kWireTypes{{{stream::SampleType::U8, 1},
                                              {stream::SampleType::I8, 1},
                                              {stream::SampleType::U16, 2},
                                              {stream::SampleType::I16, 2},
                                              {stream::SampleType::U32, 4},
                                              {stream::SampleType::I32, 4},
                                              {stream::SampleType::I64, 8},
                                              {stream::SampleType::F32, 4},
                                              {stream::SampleType::F64, 8}}};
// The largest panel side: 2^20 px is far beyond any detector; it keeps the product in range.
constexpr uint32_t kMaxSide = 1u << 20;

uint8_t wire_code(stream::SampleType type) {
  for (std::size_t i = 0; i < kWireTypes.size(); ++i)
    if (kWireTypes[i].type == type) return static_cast<uint8_t>(i);
  MIXPREC_CHECK(false, "[frame message] sample type without a wire code");
  return 0;
}

// Little-endian stores and loads, byte by byte: the format does not depend on the host.
template <typename T>
void put(std::byte* at, T value) {
  using U = std::make_unsigned_t<T>;
  const auto u = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((u >> (8 * i)) & 0xff);
}
template <typename T>
T get(const std::byte* at) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    u |= static_cast<U>(std::to_integer<U>(at[i]) << (8 * i));
  return static_cast<T>(u);
}

[[noreturn]] void bad(const std::string& what) { throw Error("[frame message] " + what); }

}  // namespace

FrameHeader frame_header(int64_t index, stream::SampleType type, int64_t panels, int64_t rows,
                         int64_t cols, int64_t sent_ns) {
  MIXPREC_CHECK(index >= 0 && panels >= 1 && rows >= 1 && cols >= 1 && panels <= kMaxSide &&
                    rows <= kMaxSide && cols <= kMaxSide &&
                    panels * rows * cols <= kMaxFrameElements,
                "[frame message] frame ", index, " of shape [", panels, ", ", rows, ", ", cols,
                "] cannot be sent (index >= 0, sides in [1, 2^20], at most 2^28 samples)");
  FrameHeader h;
  h.kind = MessageKind::Frame;
  h.sample_type = type;
  h.index = index;
  h.panels = panels;
  h.rows = rows;
  h.cols = cols;
  h.data_bytes = static_cast<uint64_t>(panels * rows * cols) * kWireTypes[wire_code(type)].bytes;
  h.sent_ns = sent_ns;
  return h;
}

FrameHeader end_header(int64_t frames_sent, int64_t sent_ns) {
  MIXPREC_CHECK(frames_sent >= 0, "[frame message] frames sent must be >= 0");
  FrameHeader h;
  h.kind = MessageKind::End;
  h.sample_type = stream::SampleType::U8;
  h.index = frames_sent;
  h.panels = h.rows = h.cols = 0;
  h.sent_ns = sent_ns;
  return h;
}

std::array<std::byte, kFrameHeaderBytes> encode_frame_header(const FrameHeader& h) {
  std::array<std::byte, kFrameHeaderBytes> out{};
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  put<uint16_t>(&out[4], kFrameMessageVersion);
  put<uint8_t>(&out[6], static_cast<uint8_t>(h.kind));
  put<uint8_t>(&out[7], h.kind == MessageKind::Frame ? wire_code(h.sample_type) : 0);
  put<int64_t>(&out[8], h.index);
  put<uint32_t>(&out[16], static_cast<uint32_t>(h.panels));
  put<uint32_t>(&out[20], static_cast<uint32_t>(h.rows));
  put<uint32_t>(&out[24], static_cast<uint32_t>(h.cols));
  put<uint32_t>(&out[28], 0);
  put<uint64_t>(&out[32], h.data_bytes);
  put<int64_t>(&out[40], h.sent_ns);
  return out;
}

FrameHeader parse_frame_header(std::span<const std::byte> bytes) {
  if (bytes.size() != kFrameHeaderBytes)
    bad("header is " + std::to_string(bytes.size()) + " bytes, expected " +
        std::to_string(kFrameHeaderBytes));
  const std::byte* b = bytes.data();
  if (std::memcmp(b, kMagic.data(), kMagic.size()) != 0) bad("header does not start with \"MPXF\"");
  if (const auto version = get<uint16_t>(b + 4); version != kFrameMessageVersion)
    bad("version " + std::to_string(version) + ", expected " +
        std::to_string(kFrameMessageVersion));
  FrameHeader h;
  const auto kind = get<uint8_t>(b + 6);
  if (kind != static_cast<uint8_t>(MessageKind::Frame) &&
      kind != static_cast<uint8_t>(MessageKind::End))
    bad("kind " + std::to_string(kind) + ", expected 1 (frame) or 2 (end of stream)");
  h.kind = static_cast<MessageKind>(kind);
  const auto code = get<uint8_t>(b + 7);
  h.index = get<int64_t>(b + 8);
  const auto panels = get<uint32_t>(b + 16), rows = get<uint32_t>(b + 20),
             cols = get<uint32_t>(b + 24);
  if (get<uint32_t>(b + 28) != 0) bad("reserved field is not 0");
  h.data_bytes = get<uint64_t>(b + 32);
  h.sent_ns = get<int64_t>(b + 40);
  if (h.index < 0)
    bad((h.kind == MessageKind::Frame ? "frame index " : "frames sent ") + std::to_string(h.index) +
        " < 0");
  if (h.kind == MessageKind::End) {
    if (code != 0 || panels != 0 || rows != 0 || cols != 0 || h.data_bytes != 0)
      bad("end-of-stream header with a sample type, shape or data size (all must be 0)");
    h.panels = h.rows = h.cols = 0;
    return h;
  }
  if (code >= kWireTypes.size())
    bad("sample type code " + std::to_string(code) + ", expected 0..8 (u8 ... f64)");
  h.sample_type = kWireTypes[code].type;
  if (panels < 1 || rows < 1 || cols < 1 || panels > kMaxSide || rows > kMaxSide || cols > kMaxSide)
    bad("frame " + std::to_string(h.index) + " has shape [" + std::to_string(panels) + ", " +
        std::to_string(rows) + ", " + std::to_string(cols) + "], each side must be in [1, 2^20]");
  h.panels = panels;
  h.rows = rows;
  h.cols = cols;
  // Sides <= 2^20 each: the product fits int64 (2^60) before it is compared.
  if (h.elements() > kMaxFrameElements)
    bad("frame " + std::to_string(h.index) + " has " + std::to_string(h.elements()) +
        " samples, more than 2^28");
  const uint64_t expected = static_cast<uint64_t>(h.elements()) * kWireTypes[code].bytes;
  if (h.data_bytes != expected)
    bad("frame " + std::to_string(h.index) + " declares " + std::to_string(h.data_bytes) +
        " data bytes, its shape and sample type make " + std::to_string(expected));
  return h;
}

void check_message_parts(const FrameHeader& h, std::span<const std::size_t> part_bytes) {
  if (h.kind == MessageKind::End) {
    if (!part_bytes.empty())
      bad("end-of-stream message has " + std::to_string(part_bytes.size()) +
          " parts after the header, expected none");
    return;
  }
  if (part_bytes.size() != 1)
    bad("frame " + std::to_string(h.index) + " has " + std::to_string(part_bytes.size()) +
        " parts after the header, expected 1 (the data)");
  if (part_bytes[0] != h.data_bytes)
    bad("frame " + std::to_string(h.index) + " has " + std::to_string(part_bytes[0]) +
        " data bytes, its header declares " + std::to_string(h.data_bytes) + " (truncated?)");
}

}  // namespace mixprec::pipeline
