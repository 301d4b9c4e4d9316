// JPEG output, decoded with libjpeg-turbo's own decoder: the size, the colours within JPEG's
// loss, and bad input named clearly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cmath>
#include <vector>

#include "io_test_util.h"
#include "mixprec/io/jpeg.h"

namespace mixprec::io {
namespace {

using test::error_of;
using ::testing::HasSubstr;

struct Decoded {
  int width = 0, height = 0, subsampling = -1;
  std::vector<unsigned char> rgb;
};

Decoded decode(const std::string& jpeg) {
  tjhandle handle = tjInitDecompress();
  auto* bytes = reinterpret_cast<const unsigned char*>(jpeg.data());
  Decoded d;
  int colorspace = 0;
  EXPECT_EQ(tjDecompressHeader3(handle, bytes, jpeg.size(), &d.width, &d.height, &d.subsampling,
                                &colorspace),
            0);
  d.rgb.resize(static_cast<std::size_t>(d.width * d.height * 3));
  EXPECT_EQ(
      tjDecompress2(handle, bytes, jpeg.size(), d.rgb.data(), d.width, 0, d.height, TJPF_RGB, 0),
      0);
  tjDestroy(handle);
  return d;
}

TEST(Jpeg, EncodesAFrameItsDecoderReadsBackClosely) {
  // Left half red, right half dark blue: flat areas JPEG keeps within a few levels.
  Tensor frame = Tensor::full({3, 16, 24}, -1.0);
  frame.select(0, 0).narrow(1, 0, 12).fill_(1.0);
  frame.select(0, 2).narrow(1, 12, 12).fill_(-0.5);
  const std::string jpeg = encode_jpeg(frame.unsqueeze(0), 95);
  ASSERT_GE(jpeg.size(), 4u);
  EXPECT_EQ(static_cast<unsigned char>(jpeg[0]), 0xFF);  // SOI marker
  EXPECT_EQ(static_cast<unsigned char>(jpeg[1]), 0xD8);
  const Decoded d = decode(jpeg);
  EXPECT_EQ(d.width, 24);
  EXPECT_EQ(d.height, 16);
  EXPECT_EQ(d.subsampling, TJSAMP_444);
  auto at = [&](int y, int x, int c) { return static_cast<int>(d.rgb[(y * 24 + x) * 3 + c]); };
  EXPECT_NEAR(at(8, 2, 0), 255, 4);  // red
  EXPECT_NEAR(at(8, 2, 2), 0, 4);
  EXPECT_NEAR(at(8, 21, 0), 0, 4);  // blue at byte 64 (-0.5)
  EXPECT_NEAR(at(8, 21, 2), 64, 4);
}

TEST(Jpeg, RejectsBadQualityAndShapes) {
  EXPECT_THAT(error_of([] {
                encode_jpeg(Tensor::zeros({3, 8, 8}), 0);
              }),
              HasSubstr("[encode_jpeg] quality must be 1..100, got 0"));
  EXPECT_THAT(error_of([] {
                encode_jpeg(Tensor::zeros({4, 8, 8}));
              }),
              HasSubstr("[encode_jpeg] expected an RGB image"));
}

}  // namespace
}  // namespace mixprec::io
