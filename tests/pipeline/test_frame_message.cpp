// The ZeroMQ frame header (pipeline/frame_message.h): a round trip of every field, and every way
// a header from the network can be wrong, each refused with a message that names the field.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/pipeline/frame_message.h"

namespace mixprec::pipeline {
namespace {

using stream::SampleType;

std::vector<std::byte> encoded(const FrameHeader& h) {
  const auto a = encode_frame_header(h);
  return {a.begin(), a.end()};
}

template <typename T>
void poke(std::vector<std::byte>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);  // the tests run on little-endian x86
}

// The message of the Error parse_frame_header throws, or "" when it accepts the bytes.
std::string refusal(const std::vector<std::byte>& bytes) {
  try {
    parse_frame_header(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FrameMessage, HeaderRoundTripsEveryField) {
  const FrameHeader h =
      frame_header(123456789012, SampleType::U16, 16, 352, 384, 1700000000123456789);
  EXPECT_EQ(h.data_bytes, 16u * 352 * 384 * 2);
  const std::vector<std::byte> bytes = encoded(h);
  ASSERT_EQ(bytes.size(), kFrameHeaderBytes);
  EXPECT_EQ(std::memcmp(bytes.data(), "MPXF", 4), 0);
  const FrameHeader back = parse_frame_header(bytes);
  EXPECT_EQ(back.kind, MessageKind::Frame);
  EXPECT_EQ(back.sample_type, SampleType::U16);
  EXPECT_EQ(back.index, 123456789012);
  EXPECT_EQ(back.panels, 16);
  EXPECT_EQ(back.rows, 352);
  EXPECT_EQ(back.cols, 384);
  EXPECT_EQ(back.data_bytes, h.data_bytes);
  EXPECT_EQ(back.sent_ns, 1700000000123456789);

  for (SampleType t :
       {SampleType::U8, SampleType::I8, SampleType::U16, SampleType::I16, SampleType::U32,
        SampleType::I32, SampleType::I64, SampleType::F32, SampleType::F64})
    EXPECT_EQ(parse_frame_header(encoded(frame_header(1, t, 1, 2, 3))).sample_type, t);

  const FrameHeader end = parse_frame_header(encoded(end_header(40, 5)));
  EXPECT_EQ(end.kind, MessageKind::End);
  EXPECT_EQ(end.index, 40);
  EXPECT_EQ(end.data_bytes, 0u);
}

TEST(FrameMessage, TheLayoutIsTheDocumentedOne) {
  // Offsets of docs/STREAM.md, checked byte by byte, so the format cannot drift unnoticed.
  const std::vector<std::byte> b =
      encoded(frame_header(0x0102030405060708, SampleType::F32, 2, 3, 5, 9));
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(b[i]); };
  EXPECT_EQ(u8(4), 1u);  // version, little-endian
  EXPECT_EQ(u8(5), 0u);
  EXPECT_EQ(u8(6), 1u);  // kind frame
  EXPECT_EQ(u8(7), 7u);  // f32
  EXPECT_EQ(u8(8), 0x08u);
  EXPECT_EQ(u8(15), 0x01u);
  EXPECT_EQ(u8(16), 2u);
  EXPECT_EQ(u8(20), 3u);
  EXPECT_EQ(u8(24), 5u);
  EXPECT_EQ(u8(32), 2u * 3 * 5 * 4);
  EXPECT_EQ(u8(40), 9u);
}

TEST(FrameMessage, MalformedHeadersAreRefusedNamingTheField) {
  const std::vector<std::byte> good = encoded(frame_header(7, SampleType::U16, 4, 352, 384));
  ASSERT_EQ(refusal(good), "");

  EXPECT_NE(refusal({}).find("header is 0 bytes, expected 48"), std::string::npos);
  EXPECT_NE(refusal({good.begin(), good.begin() + 47}).find("47 bytes"), std::string::npos);
  std::vector<std::byte> longer = good;
  longer.push_back(std::byte{0});
  EXPECT_NE(refusal(longer).find("49 bytes"), std::string::npos);

  auto with = [&](auto change) {
    std::vector<std::byte> b = good;
    change(b);
    return refusal(b);
  };
  EXPECT_NE(with([](auto& b) { b[0] = std::byte{'X'}; }).find("MPXF"), std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint16_t>(b, 4, 2); }).find("version 2"), std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint8_t>(b, 6, 0); }).find("kind 0"), std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint8_t>(b, 6, 3); }).find("kind 3"), std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint8_t>(b, 7, 9); }).find("sample type code 9"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint8_t>(b, 7, 255); }).find("sample type code 255"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<int64_t>(b, 8, -1); }).find("frame index -1"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint32_t>(b, 16, 0); }).find("shape [0, 352, 384]"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint32_t>(b, 20, 0xffffffffu); }).find("each side"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint32_t>(b, 28, 1); }).find("reserved"), std::string::npos);
  // Sides each allowed, product too large: refused before any size is computed from it.
  EXPECT_NE(with([](auto& b) {
              poke<uint32_t>(b, 16, 1u << 20);
              poke<uint32_t>(b, 20, 1u << 20);
              poke<uint32_t>(b, 24, 1u << 20);
            }).find("more than 2^28"),
            std::string::npos);
  // A data size that disagrees with the shape (a wrapped-around 64-bit count among them).
  EXPECT_NE(with([](auto& b) { poke<uint64_t>(b, 32, 4 * 352 * 384 * 2 - 1); }).find("declares"),
            std::string::npos);
  EXPECT_NE(with([](auto& b) { poke<uint64_t>(b, 32, ~uint64_t{0}); }).find("declares"),
            std::string::npos);

  // An end message must carry no shape, type or data.
  std::vector<std::byte> end = encoded(end_header(3));
  ASSERT_EQ(refusal(end), "");
  poke<uint32_t>(end, 16, 1);
  EXPECT_NE(refusal(end).find("end-of-stream header"), std::string::npos);
}

TEST(FrameMessage, PartsMustMatchTheHeader) {
  const FrameHeader frame = frame_header(2, SampleType::F32, 1, 4, 4);
  const std::size_t right = 64, short_part = 63;
  EXPECT_NO_THROW(check_message_parts(frame, std::vector<std::size_t>{right}));
  EXPECT_THROW(check_message_parts(frame, std::vector<std::size_t>{}), Error);
  EXPECT_THROW(check_message_parts(frame, std::vector<std::size_t>{short_part}), Error);
  EXPECT_THROW(check_message_parts(frame, std::vector<std::size_t>{right, right}), Error);
  const FrameHeader end = end_header(1);
  EXPECT_NO_THROW(check_message_parts(end, std::vector<std::size_t>{}));
  EXPECT_THROW(check_message_parts(end, std::vector<std::size_t>{1}), Error);
}

TEST(FrameMessage, SenderSideRefusesShapesItCouldNotSend) {
  EXPECT_THROW(frame_header(-1, SampleType::U16, 1, 2, 2), Error);
  EXPECT_THROW(frame_header(0, SampleType::U16, 0, 2, 2), Error);
  EXPECT_THROW(frame_header(0, SampleType::U16, 1, int64_t{1} << 21, 2), Error);
  EXPECT_THROW(frame_header(0, SampleType::U16, 1 << 10, 1 << 10, 1 << 10), Error);  // 2^30 samples
}

}  // namespace
}  // namespace mixprec::pipeline
