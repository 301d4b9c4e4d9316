#pragma once
// The wire format of detector frames over ZeroMQ (docs/STREAM.md, "Frames over ZeroMQ").
//
// A frame is a two-part ZeroMQ message: [header, data]. The end of a producer's stream is a
// one-part message: [header] with kind End. The header is 48 bytes, little-endian:
//
//   offset size  field
//    0      4    magic "MPXF"
//    4      2    version, 1
//    6      1    kind: 1 frame, 2 end of stream
//    7      1    sample type of the data: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 i64, 7 f32,
//                8 f64 (0 in an end message)
//    8      8    frame: the frame's index in the producer's stream (int64 >= 0);
//                end: the number of frames the producer sent
//   16      4    panels (uint32 >= 1; 1 for a single-panel detector)   ) the frame is
//   20      4    rows per panel (uint32 >= 1)                          ) [panels, rows, cols],
//   24      4    cols per panel (uint32 >= 1)                          ) row-major, cols fastest
//   28      4    reserved, 0
//   32      8    data bytes (uint64) = panels * rows * cols * sample size (0 in an end message)
//   40      8    producer's send time, ns since the Unix epoch (int64; 0 when unknown)
//
// A fixed binary header, not JSON: every field has one offset and one width, so parsing is a
// handful of bounds checks a fuzzer can cover, and a 4 MiB frame costs 48 bytes of framing.
// Messages come from the network and are untrusted: parse_frame_header() checks every field
// (and that the element count neither overflows nor exceeds kMaxFrameElements) and throws
// mixprec::Error("[frame message] ...") naming the field; it never reads past `bytes`.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "mixprec/stream/sample_types.h"

namespace mixprec::pipeline {

inline constexpr std::size_t kFrameHeaderBytes = 48;
inline constexpr uint16_t kFrameMessageVersion = 1;
// 2^28 samples (1 GiB of f32): a Jungfrau 16M frame is 2^24; anything larger is a bad header.
inline constexpr int64_t kMaxFrameElements = int64_t{1} << 28;

enum class MessageKind : uint8_t { Frame = 1, End = 2 };

struct FrameHeader {
  MessageKind kind = MessageKind::Frame;
  stream::SampleType sample_type = stream::SampleType::U16;
  int64_t index = 0;  // frame: its index; end: frames sent
  int64_t panels = 1, rows = 0, cols = 0;
  uint64_t data_bytes = 0;
  int64_t sent_ns = 0;

  int64_t elements() const { return panels * rows * cols; }
};

// The header of frame `index` ([panels, rows, cols] samples of `type`), stamped `sent_ns`.
FrameHeader frame_header(int64_t index, stream::SampleType type, int64_t panels, int64_t rows,
                         int64_t cols, int64_t sent_ns = 0);
// The header of an end-of-stream message after `frames_sent` frames.
FrameHeader end_header(int64_t frames_sent, int64_t sent_ns = 0);

std::array<std::byte, kFrameHeaderBytes> encode_frame_header(const FrameHeader& header);
// Error for a wrong size, magic, version, kind, sample type, shape, reserved field or data size.
FrameHeader parse_frame_header(std::span<const std::byte> bytes);
// The parts after the header: Error unless a frame has exactly one data part of data_bytes and
// an end message has none (`part_bytes` lists the sizes of the parts after the header).
void check_message_parts(const FrameHeader& header, std::span<const std::size_t> part_bytes);

}  // namespace mixprec::pipeline
