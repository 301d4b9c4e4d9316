// PNG and animated GIF output: exact round trips, the float -> byte mapping, corrupt input,
// GIFs checked with giflib's own decoder, and failures that leave no file behind.
#include <gif_lib.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "io_test_util.h"
#include "mixprec/core/random.h"
#include "mixprec/io/image.h"

namespace mixprec::io {
namespace {

using test::error_of;
using test::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<uint8_t> bytes_of(const Tensor& u8) {
  const Tensor c = u8.contiguous();
  const auto* p = c.data<uint8_t>();
  return std::vector<uint8_t>(p, p + c.numel());
}

Tensor random_u8(int64_t h, int64_t w, uint64_t seed) {
  Generator gen(seed);
  std::vector<uint8_t> v(static_cast<std::size_t>(h * w * 3));
  for (auto& x : v) x = static_cast<uint8_t>(gen.next_u32() >> 24);
  return Tensor::from_vector(v, {h, w, 3});
}

// Runs body with the process's file size limit at `bytes` (SIGXFSZ ignored, so writes fail
// with EFBIG as a full disk would fail with ENOSPC), restoring both afterwards.
template <typename Body>
std::string error_with_file_limit(rlim_t bytes, Body&& body) {
  rlimit old_limit;
  EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = bytes;
  EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message = error_of(body);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  return message;
}

// A smooth test frame like the video model's: a diagonal gradient and an anti-aliased disc
// moving with t, [3, h, w] in [-1, 1].
Tensor smooth_frame(int64_t h, int64_t w, int64_t t) {
  Tensor f = Tensor::empty({3, h, w});
  float* p = f.data<float>();
  const double cx = 10 + 1.5 * static_cast<double>(t), cy = 0.4 * static_cast<double>(h);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const double g = static_cast<double>(x + y) / static_cast<double>(h + w);
      const double d = std::hypot(x + 0.5 - cx, y + 0.5 - cy) - 8;
      const double a = std::clamp(0.5 - d, 0.0, 1.0);
      const double rgb[3] = {0.2 + 0.5 * g, 0.3 + 0.2 * g, 0.7 - 0.4 * g};
      const double disc[3] = {0.95, 0.8, 0.1};
      for (int c = 0; c < 3; ++c)
        p[(c * h + y) * w + x] = static_cast<float>(2 * (rgb[c] + a * (disc[c] - rgb[c])) - 1);
    }
  }
  return f;
}

// ---- the float -> byte mapping ----

TEST(Image, FloatToByteBoundaries) {
  EXPECT_EQ(float_to_byte(-1.0f), 0);
  EXPECT_EQ(float_to_byte(1.0f), 255);
  EXPECT_EQ(float_to_byte(0.0f), 128);  // 127.5 rounds up
  EXPECT_EQ(float_to_byte(-3.0f), 0);   // clamped
  EXPECT_EQ(float_to_byte(1.5f), 255);
  EXPECT_EQ(float_to_byte(std::numeric_limits<float>::infinity()), 255);
  EXPECT_EQ(float_to_byte(-std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(float_to_byte(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(float_to_byte(-std::numeric_limits<float>::quiet_NaN()), 0);
  // The step edges, from both sides: byte k below (k + 0.5) / 127.5 - 1, k + 1 above.
  for (int k = 0; k < 255; ++k) {
    // Just below 0, v + 1 rounds to 1 in double: 0 is a tie that rounds up from both sides.
    if (k == 127) continue;
    const double edge = (k + 0.5) / 127.5 - 1.0;  // the boundary between bytes k and k + 1
    EXPECT_EQ(float_to_byte(std::nextafter(static_cast<float>(edge), -2.0f)), k) << k;
    EXPECT_EQ(float_to_byte(std::nextafter(static_cast<float>(edge), 2.0f)), k + 1) << k;
  }
}

TEST(Image, EveryByteSurvivesTheFloatRoundTripInEveryDtype) {
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    std::vector<float> v(256);
    for (int k = 0; k < 256; ++k) v[k] = static_cast<float>(k / 127.5 - 1.0);
    const Tensor image = Tensor::from_vector(v, {16, 16, 1}).expand({16, 16, 3}).to(dtype);
    const Rgb8Image bytes = to_rgb8(image);
    for (int k = 0; k < 256; ++k) {
      ASSERT_EQ(bytes.pixels[k * 3], k) << dtype_name(dtype);
      ASSERT_EQ(bytes.pixels[k * 3 + 2], k) << dtype_name(dtype);
    }
  }
}

TEST(Image, LayoutsAgree) {
  Generator gen(4);
  const Tensor chw = Tensor::uniform({3, 5, 7}, -1.2, 1.2, gen);
  const std::vector<uint8_t> expected = to_rgb8(chw).pixels;
  EXPECT_EQ(to_rgb8(chw.unsqueeze(0).contiguous(MemoryFormat::ChannelsLast)).pixels, expected);
  EXPECT_EQ(to_rgb8(chw.permute({1, 2, 0}).contiguous()).pixels, expected);
  EXPECT_EQ(to_rgb8(chw.to(DType::BF16)).height, 5);
  EXPECT_EQ(to_rgb8(chw).width, 7);
  // byte (y, x, c) = mapped chw[c, y, x]
  EXPECT_EQ(expected[(2 * 7 + 3) * 3 + 1], float_to_byte(static_cast<float>(chw.value({1, 2, 3}))));
}

TEST(Image, BadImagesThrow) {
  ScratchDir dir;
  const std::string path = dir.file("x.png");
  EXPECT_THAT(error_of([&] {
                write_png(path, Tensor::zeros({4, 8, 8}));
              }),
              HasSubstr("[write_png] expected an RGB image of shape [3, H, W], [1, 3, H, W] or "
                        "[H, W, 3], got [4, 8, 8]"));
  EXPECT_THAT(error_of([&] {
                write_png(path, Tensor::zeros({2, 3, 8, 8}));
              }),
              HasSubstr("got [2, 3, 8, 8]"));
  EXPECT_THAT(error_of([&] {
                write_png(path, Tensor::zeros({3, 8, 8}, DType::I32));
              }),
              HasSubstr("[write_png] an image must be floating"));
  EXPECT_THAT(error_of([&] {
                write_png(path, Tensor::zeros({3, 8, 8}, DType::U8));
              }),
              HasSubstr("[write_png] a uint8 image must be [H, W, 3], got shape [3, 8, 8]"));
  EXPECT_THAT(error_of([&] {
                write_png(path, Tensor::zeros({3, 0, 8}));
              }),
              HasSubstr("[write_png] the image is empty"));
  EXPECT_THAT(error_of([&] { write_png(path, Tensor()); }), HasSubstr("undefined"));
  EXPECT_THAT(error_of([&] {
                write_png(path, Rgb8Image{2, 2, std::vector<uint8_t>(11)});
              }),
              HasSubstr("expected 12 bytes for a 2x2 RGB image, got 11"));
  EXPECT_TRUE(dir.entries().empty());
}

// ---- PNG ----

TEST(Png, Uint8RoundTripIsExact) {
  ScratchDir dir;
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {37, 53}, {64, 64}, {3, 300}}) {
    const Tensor image = random_u8(h, w, static_cast<uint64_t>(h * 1000 + w));
    write_png(dir.file("u8.png"), image);
    const Tensor back = read_png(dir.file("u8.png"));
    ASSERT_EQ(back.shape(), (Shape{h, w, 3}));
    EXPECT_EQ(back.dtype(), DType::U8);
    EXPECT_EQ(bytes_of(back), bytes_of(image));
  }
  EXPECT_THAT(dir.entries(), ElementsAre("u8.png"));  // no temporaries left
}

TEST(Png, FloatRoundTripIsExactForRepresentableValues) {
  ScratchDir dir;
  // v = k / 127.5 - 1 for every byte k in every position: channels_last [1, 3, H, W] in bf16.
  const Tensor bytes = random_u8(24, 40, 9);
  const Tensor image =
      bytes.to(DType::F64).permute({2, 0, 1}).unsqueeze(0).contiguous(MemoryFormat::ChannelsLast);
  Tensor scaled = Tensor::empty(image.shape(), DType::F64);
  scaled.copy_(image);
  auto* p = scaled.data<double>();
  for (int64_t i = 0; i < scaled.numel(); ++i) p[i] = p[i] / 127.5 - 1.0;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    write_png(dir.file("f.png"), scaled.to(dtype).contiguous(MemoryFormat::ChannelsLast));
    EXPECT_EQ(bytes_of(read_png(dir.file("f.png"))), bytes_of(bytes)) << dtype_name(dtype);
  }
}

TEST(Png, ReadsFilesFromAnIndependentEncoder) {
  // libpng's simplified API writes grey, grey + alpha, RGBA and 16-bit files we never write.
  ScratchDir dir;
  const std::string path = dir.file("other.png");
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = 3;
  img.height = 2;
  img.format = PNG_FORMAT_RGBA;
  const uint8_t rgba[2][3][4] = {{{10, 20, 30, 0}, {40, 50, 60, 128}, {70, 80, 90, 255}},
                                 {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}}};
  ASSERT_NE(png_image_write_to_file(&img, path.c_str(), 0, rgba, 0, nullptr), 0);
  EXPECT_EQ(bytes_of(read_png(path)), (std::vector<uint8_t>{10, 20, 30, 40, 50, 60, 70, 80, 90, 1,
                                                            2, 3, 5, 6, 7, 9, 10, 11}));

  img = png_image{};
  img.version = PNG_IMAGE_VERSION;
  img.width = 2;
  img.height = 1;
  img.format = PNG_FORMAT_GRAY;
  const uint8_t grey[2] = {7, 200};
  ASSERT_NE(png_image_write_to_file(&img, path.c_str(), 0, grey, 0, nullptr), 0);
  EXPECT_EQ(bytes_of(read_png(path)), (std::vector<uint8_t>{7, 7, 7, 200, 200, 200}));

  // 16-bit linear grey: the high byte of the stored (sRGB-encoded) sample is kept. The
  // simplified API encodes linear 16-bit data as-is with a gAMA of 1, so the high byte of
  // 0xFFFF is 255 and of 0 is 0.
  img = png_image{};
  img.version = PNG_IMAGE_VERSION;
  img.width = 2;
  img.height = 1;
  img.format = PNG_FORMAT_LINEAR_Y;
  const uint16_t grey16[2] = {0, 65535};
  ASSERT_NE(png_image_write_to_file(&img, path.c_str(), 0, grey16, 0, nullptr), 0);
  EXPECT_EQ(bytes_of(read_png(path)), (std::vector<uint8_t>{0, 0, 0, 255, 255, 255}));
}

TEST(Png, AnIndependentDecoderReadsWhatWeWrite) {
  ScratchDir dir;
  const Tensor image = random_u8(9, 13, 77);
  write_png(dir.file("ours.png"), image);
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  ASSERT_NE(png_image_begin_read_from_file(&img, dir.file("ours.png").c_str()), 0);
  img.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(img));
  ASSERT_NE(png_image_finish_read(&img, nullptr, pixels.data(), 0, nullptr), 0);
  EXPECT_EQ(img.width, 13u);
  EXPECT_EQ(img.height, 9u);
  EXPECT_EQ(pixels, bytes_of(image));
}

TEST(Png, CorruptOrTruncatedFilesThrowNeverCrash) {
  ScratchDir dir;
  write_png(dir.file("good.png"), random_u8(12, 10, 5));
  const test::Bytes good = test::read_file(dir.file("good.png"));
  const std::string bad = dir.file("bad.png");
  // Every truncation is an error (the IEND chunk is checked too).
  for (std::size_t n = 0; n < good.size(); ++n) {
    test::write_file(bad, test::Bytes(good.begin(), good.begin() + static_cast<long>(n)));
    const std::string message = error_of([&] { read_png(bad); });
    ASSERT_THAT(message, HasSubstr("[read_png] " + bad + ": ")) << n << " bytes";
  }
  EXPECT_THAT(error_of([&] {
                test::write_file(bad, test::Bytes(good.begin(), good.end() - 5));
                read_png(bad);
              }),
              HasSubstr("truncated"));
  // Every single-bit flip: an error or (a flip libpng tolerates, e.g. in an ancillary chunk
  // type) an image of the same size; never a crash, never an overrun (ASan runs this too).
  int errors = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    test::Bytes flipped = good;
    flipped[i] ^= std::byte{static_cast<unsigned char>(1u << (i % 8))};
    test::write_file(bad, flipped);
    try {
      const Tensor t = read_png(bad);
      EXPECT_EQ(t.dim(), 3);
    } catch (const Error& e) {
      ++errors;
      EXPECT_THAT(e.what(), HasSubstr("[read_png] "));
    }
  }
  EXPECT_GT(errors, static_cast<int>(good.size() * 9 / 10));
  // Not a PNG at all, and no file.
  test::write_file(bad, {std::byte{'G'}, std::byte{'I'}, std::byte{'F'}, std::byte{'8'},
                         std::byte{'9'}, std::byte{'a'}, std::byte{0}, std::byte{0}});
  EXPECT_THAT(error_of([&] { read_png(bad); }), HasSubstr("not a PNG file (bad signature)"));
  EXPECT_THAT(error_of([&] { read_png(dir.file("missing.png")); }),
              HasSubstr("[read_png] " + dir.file("missing.png") + ": cannot open"));
  EXPECT_THAT(error_of([&] { read_png(dir.path()); }), HasSubstr("not a regular file"));
}

TEST(Png, FailuresLeaveNoFile) {
  ScratchDir dir;
  EXPECT_THAT(error_of([&] { write_png(dir.file("no/such/dir/x.png"), random_u8(4, 4, 1)); }),
              HasSubstr("[write_png] " + dir.file("no/such/dir/x.png") +
                        ": cannot create a temporary file"));
  // A failed write (file size limit: as a full disk) keeps the old file and leaves no temporary.
  const std::string path = dir.file("keep.png");
  write_png(path, random_u8(4, 4, 2));
  const test::Bytes old = test::read_file(path);
  const std::string message =
      error_with_file_limit(4096, [&] { write_png(path, random_u8(200, 200, 3)); });
  EXPECT_THAT(message, HasSubstr("[write_png] " + path + ": write failed: File too large"));
  EXPECT_EQ(test::read_file(path), old);
  EXPECT_THAT(dir.entries(), ElementsAre("keep.png"));
}

// ---- GIF ----

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};
using GifHandle = std::unique_ptr<GifFileType, GifCloser>;

GifHandle slurp(const std::string& path) {
  int error = 0;
  GifHandle gif(DGifOpenFileName(path.c_str(), &error));
  EXPECT_TRUE(gif) << GifErrorString(error);
  if (gif) {
    EXPECT_EQ(DGifSlurp(gif.get()), GIF_OK) << GifErrorString(gif->Error);
  }
  return gif;
}

TEST(Gif, DelaysFollowTheRoundingRule) {
  std::vector<int> d30, d24;
  for (int i = 0; i < 6; ++i) d30.push_back(GifWriter::delay_centiseconds(i, 30));
  for (int i = 0; i < 6; ++i) d24.push_back(GifWriter::delay_centiseconds(i, 24));
  EXPECT_EQ(d30, (std::vector<int>{3, 4, 3, 3, 4, 3}));  // round(100 i / 30) steps
  EXPECT_EQ(d24, (std::vector<int>{4, 4, 5, 4, 4, 4}));
  EXPECT_EQ(GifWriter::delay_centiseconds(17, 25), 4);
  EXPECT_EQ(GifWriter::delay_centiseconds(3, 100), 1);
  EXPECT_EQ(GifWriter::delay_centiseconds(0, 0.5), 200);
  // The total never drifts: within half a hundredth of frames / fps.
  for (double fps : {7.0, 12.5, 24.0, 29.97, 30.0, 60.0}) {
    long total = 0;
    for (int i = 0; i < 1000; ++i) total += GifWriter::delay_centiseconds(i, fps);
    EXPECT_NEAR(static_cast<double>(total), 100.0 * 1000 / fps, 0.5) << fps;
  }
}

TEST(Gif, PaletteIsTheColourCubeAndDitheringKeepsCubeColours) {
  EXPECT_EQ(GifWriter::palette_color(0), (std::array<uint8_t, 3>{0, 0, 0}));
  EXPECT_EQ(GifWriter::palette_color(251), (std::array<uint8_t, 3>{255, 255, 255}));
  EXPECT_EQ(GifWriter::palette_color(42), (std::array<uint8_t, 3>{51, 0, 0}));
  EXPECT_EQ(GifWriter::palette_color(6), (std::array<uint8_t, 3>{0, 43, 0}));  // 42.5 rounds up
  for (int i = 0; i < 252; ++i) {
    const auto c = GifWriter::palette_color(static_cast<uint8_t>(i));
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) ASSERT_EQ(GifWriter::quantize(c[0], c[1], c[2], x, y), i);
  }
  // A flat colour between levels: the 8 x 8 average matches it to within a byte.
  for (int v : {20, 100, 128, 200, 250}) {
    double sum = 0;
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x)
        sum += GifWriter::palette_color(GifWriter::quantize(v, v, v, x, y))[1];
    EXPECT_NEAR(sum / 64, v, 1.0) << v;
  }
}

TEST(Gif, GiflibDecodesFramesSizeDelaysLoopAndColours) {
  ScratchDir dir;
  const std::string path = dir.file("video.gif");
  const int64_t n = 12;
  {
    GifWriter gif(path, 56, 40, 30);
    for (int64_t t = 0; t < n; ++t) {
      gif.add_frame(smooth_frame(40, 56, t));
      EXPECT_EQ(gif.frames(), t + 1);
      EXPECT_FALSE(std::filesystem::exists(path));  // appears only on close
    }
    gif.close();
  }
  EXPECT_THAT(dir.entries(), ElementsAre("video.gif"));
  GifHandle gif = slurp(path);
  ASSERT_TRUE(gif);
  EXPECT_EQ(gif->SWidth, 56);
  EXPECT_EQ(gif->SHeight, 40);
  ASSERT_EQ(gif->ImageCount, n);
  ASSERT_NE(gif->SColorMap, nullptr);
  // Looping: the NETSCAPE2.0 application extension with loop count 0, before the first frame.
  bool loops = false;
  const SavedImage& first = gif->SavedImages[0];
  for (int i = 0; i + 1 < first.ExtensionBlockCount; ++i) {
    const ExtensionBlock& b = first.ExtensionBlocks[i];
    if (b.Function == APPLICATION_EXT_FUNC_CODE && b.ByteCount == 11 &&
        std::memcmp(b.Bytes, "NETSCAPE2.0", 11) == 0) {
      const ExtensionBlock& sub = first.ExtensionBlocks[i + 1];
      loops = sub.ByteCount == 3 && sub.Bytes[0] == 1 && sub.Bytes[1] == 0 && sub.Bytes[2] == 0;
    }
  }
  EXPECT_TRUE(loops);
  for (int i = 0; i < n; ++i) {
    GraphicsControlBlock gcb;
    ASSERT_EQ(DGifSavedExtensionToGCB(gif.get(), i, &gcb), GIF_OK);
    EXPECT_EQ(gcb.DelayTime, GifWriter::delay_centiseconds(i, 30)) << i;
    const SavedImage& frame = gif->SavedImages[i];
    ASSERT_EQ(frame.ImageDesc.Width, 56);
    ASSERT_EQ(frame.ImageDesc.Height, 40);
    // Colours: each pixel within one cube step of the input, and 4 x 4 block averages close.
    const Rgb8Image input = to_rgb8(smooth_frame(40, 56, i));
    const ColorMapObject* map =
        frame.ImageDesc.ColorMap ? frame.ImageDesc.ColorMap : gif->SColorMap;
    const int step[3] = {51, 43, 51};
    double worst_block = 0;
    for (int by = 0; by < 40; by += 4) {
      for (int bx = 0; bx < 56; bx += 4) {
        double sum_in[3] = {0, 0, 0}, sum_out[3] = {0, 0, 0};
        for (int y = by; y < by + 4; ++y) {
          for (int x = bx; x < bx + 4; ++x) {
            const GifColorType c = map->Colors[frame.RasterBits[y * 56 + x]];
            const uint8_t out[3] = {c.Red, c.Green, c.Blue};
            for (int ch = 0; ch < 3; ++ch) {
              const int in = input.pixels[(y * 56 + x) * 3 + ch];
              ASSERT_LT(std::abs(in - out[ch]), step[ch]) << i << " " << x << " " << y;
              sum_in[ch] += in;
              sum_out[ch] += out[ch];
            }
          }
        }
        for (int ch = 0; ch < 3; ++ch)
          worst_block = std::max(worst_block, std::fabs(sum_in[ch] - sum_out[ch]) / 16);
      }
    }
    EXPECT_LT(worst_block, 14.0) << "frame " << i;
  }
}

TEST(Gif, WriteGifTakesAWholeClip) {
  ScratchDir dir;
  Tensor clip = Tensor::empty({5, 3, 40, 56});
  for (int64_t t = 0; t < 5; ++t) clip[t].copy_(smooth_frame(40, 56, t));
  write_gif(dir.file("clip.gif"), clip.contiguous(MemoryFormat::ChannelsLast), 12.5);
  GifHandle gif = slurp(dir.file("clip.gif"));
  ASSERT_TRUE(gif);
  EXPECT_EQ(gif->ImageCount, 5);
  EXPECT_EQ(gif->SWidth, 56);
  EXPECT_EQ(gif->SHeight, 40);
  GraphicsControlBlock gcb;
  ASSERT_EQ(DGifSavedExtensionToGCB(gif.get(), 4, &gcb), GIF_OK);
  EXPECT_EQ(gcb.DelayTime, 8);
  write_gif(dir.file("u8.gif"), random_u8(12, 8, 1).unsqueeze(0), 10);  // [1, 12, 8, 3]
  EXPECT_EQ(slurp(dir.file("u8.gif"))->SHeight, 12);
  EXPECT_THAT(error_of([&] { write_gif(dir.file("bad.gif"), clip[0], 10); }),
              HasSubstr("[write_gif] " + dir.file("bad.gif") +
                        ": expected frames [T, 3, H, W] (or uint8 [T, H, W, 3]) with T >= 1, got "
                        "[3, 40, 56]"));
  EXPECT_THAT(error_of([&] { write_gif(dir.file("bad.gif"), clip.slice(0, 0, 0), 10); }),
              HasSubstr("with T >= 1"));
  EXPECT_THAT(error_of([&] {
                write_gif(dir.file("bad.gif"), Tensor::zeros({2, 4, 8, 8}), 10);
              }),
              HasSubstr("got [2, 4, 8, 8] of f32"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.gif")));
}

TEST(Gif, PlaysOnceWithoutLoop) {
  ScratchDir dir;
  const std::string path = dir.file("once.gif");
  GifWriter gif(path, 4, 4, 10, /*loop=*/false);
  gif.add_frame(random_u8(4, 4, 1));
  gif.close();
  GifHandle decoded = slurp(path);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->ImageCount, 1);
  for (int i = 0; i < decoded->SavedImages[0].ExtensionBlockCount; ++i)
    EXPECT_NE(decoded->SavedImages[0].ExtensionBlocks[i].Function, APPLICATION_EXT_FUNC_CODE);
}

TEST(Gif, MisuseThrowsAndFailuresLeaveNoFile) {
  ScratchDir dir;
  const std::string path = dir.file("x.gif");
  EXPECT_THAT(error_of([&] { GifWriter gif(path, 0, 4, 10); }),
              HasSubstr("[GifWriter] " + path + ": frame size must be in [1, 65535], got 0x4"));
  EXPECT_THAT(error_of([&] { GifWriter gif(path, 4, 4, 0); }),
              HasSubstr("fps must be in [0.01, 100]"));
  EXPECT_THAT(error_of([&] { GifWriter gif(path, 4, 4, 101); }), HasSubstr("fps"));
  EXPECT_THAT(error_of([&] { GifWriter gif(path, 4, 4, std::nan("")); }), HasSubstr("fps"));
  EXPECT_THAT(error_of([&] { GifWriter gif(dir.file("no/dir/x.gif"), 4, 4, 10); }),
              HasSubstr("cannot create a temporary file"));
  {  // destroyed without close(): nothing left, temporary included
    GifWriter gif(path, 4, 4, 10);
    gif.add_frame(random_u8(4, 4, 1));
  }
  EXPECT_TRUE(dir.entries().empty());
  {
    GifWriter gif(path, 4, 4, 10);
    EXPECT_THAT(error_of([&] { gif.close(); }), HasSubstr("close() before any frame was added"));
    EXPECT_THAT(error_of([&] { gif.add_frame(random_u8(4, 5, 1)); }),
                HasSubstr("frame 0 is 4x5, expected the writer's 4x4"));
    EXPECT_THAT(error_of([&] {
                  gif.add_frame(Tensor::zeros({3, 4}));
                }),
                HasSubstr("[GifWriter] expected an RGB image"));
    gif.add_frame(Tensor::zeros({3, 4, 4}));  // a rejected frame leaves the writer usable
    gif.close();
    EXPECT_THAT(error_of([&] {
                  gif.add_frame(Tensor::zeros({3, 4, 4}));
                }),
                HasSubstr("add_frame after close()"));
    EXPECT_THAT(error_of([&] { gif.close(); }), HasSubstr("close after close()"));
  }
  EXPECT_THAT(dir.entries(), ElementsAre("x.gif"));
  std::filesystem::remove(path);
  // A write failure mid-stream (file size limit, as a full disk): an error, then no file.
  const std::string big = dir.file("big.gif");
  const std::string message = error_with_file_limit(8192, [&] {
    GifWriter gif(big, 64, 64, 25);
    for (int i = 0; i < 100; ++i) gif.add_frame(random_u8(64, 64, static_cast<uint64_t>(i)));
    gif.close();
  });
  EXPECT_THAT(message, HasSubstr("[GifWriter] " + big + ": "));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace mixprec::io
