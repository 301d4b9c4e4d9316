// kernels::transpose_2d: every element moved bit for bit, for 2-, 4- and 8-byte elements, odd
// sizes, leading dimensions wider than the matrix, and sizes that split over threads, at every
// kernel level (AVX-512 transposes whole 64-byte sub-blocks in registers, and narrow blocks of
// pixels with a few channels by permutes).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/kernels/transpose.h"
#include "support/isa_levels.h"

namespace mixprec::kernels {
namespace {

class Transpose2d : public test_support::IsaTest {};

template <typename E>
void check(int64_t rows, int64_t cols, int64_t pad_src, int64_t pad_dst) {
  const int64_t ld_src = cols + pad_src, ld_dst = rows + pad_dst;
  std::vector<E> src(static_cast<std::size_t>(rows * ld_src));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<E>(i * 2654435761u + 7);
  std::vector<E> dst(static_cast<std::size_t>(cols * ld_dst), E(0xAB));
  transpose_2d(src.data(), rows, cols, ld_src, dst.data(), ld_dst, sizeof(E));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(dst[c * ld_dst + r], src[r * ld_src + c])
          << sizeof(E) << "-byte " << rows << " x " << cols << " at " << r << ", " << c;
  for (int64_t c = 0; c < cols; ++c)  // the padding of dst is never written
    for (int64_t r = rows; r < ld_dst; ++r) ASSERT_EQ(dst[c * ld_dst + r], E(0xAB));
}

TEST_P(Transpose2d, EveryElementSizeShapeAndLeadingDimension) {
  for (int64_t rows : {1, 3, 8, 31, 32, 33, 64, 100})
    for (int64_t cols : {1, 7, 8, 16, 17, 32, 64, 65})
      for (int64_t pad : {0, 5}) {
        check<uint16_t>(rows, cols, pad, pad);
        check<uint32_t>(rows, cols, pad, 0);
        check<uint64_t>(rows, cols, 0, pad);
      }
  check<uint16_t>(2048, 384, 0, 0);  // a Linear's gradient, split over threads
}

// Narrow blocks (a few channels of many pixels, to and from channel rows: the pixel-vector
// kernels' layouts): every power-of-two channel count the AVX-512 permute kernels take and its
// neighbours, pixel counts around their 16- and 32-pixel vectors, and a band split over threads.
TEST_P(Transpose2d, NarrowBlocksOfPixelsToAndFromChannelRows) {
  for (int64_t channels : {1, 2, 3, 4, 8, 9, 16})
    for (int64_t pixels : {1, 15, 16, 17, 31, 32, 33, 96, 100, 4099})
      for (int64_t pad : {0, 3}) {
        check<uint16_t>(pixels, channels, 0, pad);  // [pixels][C] -> [C][pixels + pad]
        check<uint16_t>(channels, pixels, pad, 0);  // [C][pixels + pad] -> [pixels][C]
        check<uint32_t>(pixels, channels, 0, pad);
        check<uint32_t>(channels, pixels, pad, 0);
      }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(Transpose2d);

TEST(Transpose2dErrors, RejectsBadGeometry) {
  std::vector<float> a(16), b(16);
  EXPECT_THROW(transpose_2d(a.data(), 4, 4, 3, b.data(), 4, 4), Error);
  EXPECT_THROW(transpose_2d(a.data(), 4, 4, 4, b.data(), 4, 3), Error);
}

}  // namespace
}  // namespace mixprec::kernels
