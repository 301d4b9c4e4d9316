// Streaming animated GIF through giflib (see io/image.h for the palette and timing choices).
//
// giflib writes through our output callback into an AtomicFile. The callback never lets an
// exception into giflib (C code): it records the message and reports a short write, giflib
// returns GIF_ERROR, and we throw from our own frame. After any failure the writer discards
// its temporary at once and refuses further use.
#include <gif_lib.h>

#include <cmath>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/image.h"

namespace mixprec::io {
namespace {

constexpr int kRedLevels = 6, kGreenLevels = 7, kBlueLevels = 6;
constexpr int kCubeColors = kRedLevels * kGreenLevels * kBlueLevels;  // 252
static_assert(kCubeColors <= 256);
constexpr int64_t kMaxSide = 65535;  // GIF stores sizes in 16 bits

// The classic 8 x 8 Bayer matrix: thresholds 0..63 spread so that any 2^k x 2^k block holds
// an even sample of them.
constexpr uint8_t kBayer8[8][8] = {
    {0, 32, 8, 40, 2, 34, 10, 42},  {48, 16, 56, 24, 50, 18, 58, 26},
    {12, 44, 4, 36, 14, 46, 6, 38}, {60, 28, 52, 20, 62, 30, 54, 22},
    {3, 35, 11, 43, 1, 33, 9, 41},  {51, 19, 59, 27, 49, 17, 57, 25},
    {15, 47, 7, 39, 13, 45, 5, 37}, {63, 31, 55, 23, 61, 29, 53, 21}};

// The byte value of each level: round(level * 255 / (levels - 1)).
inline uint8_t level_value(int level, int levels) {
  return static_cast<uint8_t>((level * 255 * 2 + (levels - 1)) / (2 * (levels - 1)));
}

// Ordered dithering of one channel between the two palette levels around v: v lies a fraction
// f = (v - lo) / (hi - lo) of the way from level lo to lo + 1, and the pixel takes lo + 1 when
// f exceeds its Bayer threshold (b + 0.5) / 64. Over any 8 x 8 block a flat input is matched
// on average, and a byte that is exactly a palette value (f = 0) is kept as is.
struct ChannelDither {
  uint8_t lo[256];        // the highest level whose value is <= v
  uint16_t frac128[256];  // 128 (v - value(lo)) / (value(lo + 1) - value(lo)), scaled as below
  int levels;

  explicit ChannelDither(int n) : levels(n) {
    for (int v = 0; v < 256; ++v) {
      int l = 0;
      while (l + 1 < n && level_value(l + 1, n) <= v) ++l;
      lo[v] = static_cast<uint8_t>(l);
      frac128[v] = 0;
      if (l + 1 < n) {
        const int a = level_value(l, n), b = level_value(l + 1, n);
        // f * 64 * 2 in fixed point with 8 more bits, compared against (2b + 1) << 8.
        frac128[v] = static_cast<uint16_t>((v - a) * 128 * 256 / (b - a));
      }
    }
  }
  int level(int v, int bayer) const {
    return lo[v] + (frac128[v] > ((2 * bayer + 1) << 8) ? 1 : 0);
  }
};

struct MapObjectDeleter {
  void operator()(ColorMapObject* map) const { GifFreeMapObject(map); }
};

}  // namespace

struct GifWriterState {
  GifWriterState(const std::string& p, int64_t w, int64_t h, double f)
      : path(p), width(w), height(h), fps(f), file(p, "GifWriter") {}

  std::string path;
  int64_t width, height;
  double fps;
  AtomicFile file;
  GifFileType* gif = nullptr;
  int64_t frames = 0;
  bool failed = false;
  bool closed = false;
  bool dropping_output = false;      // while tearing down: giflib's last bytes go nowhere
  std::string write_error;           // set by the output callback
  std::vector<GifByteType> indices;  // (H, W) palette indices of the current frame

  // Gives up: frees giflib's state and removes the temporary. Never throws.
  void abandon() noexcept {
    if (gif != nullptr) {
      dropping_output = true;
      int ignored = 0;
      EGifCloseFile(gif, &ignored);
      gif = nullptr;
    }
    file.discard();
  }

  // Throws for a failed giflib call, after abandoning the file.
  [[noreturn]] void fail(const char* what) {
    // A failed write already says "[GifWriter] <path>: write failed: <why>".
    std::string message = write_error.empty() ? "" : write_error + " (" + what + ")";
    if (message.empty()) {
      const char* text = gif != nullptr ? GifErrorString(gif->Error) : nullptr;
      message = detail::concat("[GifWriter] ", path, ": ", what, ": ",
                               text != nullptr ? text : "unknown giflib error");
    }
    failed = true;
    abandon();
    throw Error(message);
  }

  void check_usable(const char* op) const {
    MIXPREC_CHECK(!closed, "[GifWriter] ", path, ": ", op, " after close()");
    MIXPREC_CHECK(!failed, "[GifWriter] ", path, ": ", op, " after an earlier failure");
  }
};

namespace {

int write_output(GifFileType* gif, const GifByteType* data, int n) {
  auto* state = static_cast<GifWriterState*>(gif->UserData);
  if (state->dropping_output) return n;
  try {
    state->file.write(data, static_cast<std::size_t>(n));
    return n;
  } catch (const std::exception& e) {
    state->write_error = e.what();
  } catch (...) {
    state->write_error = "write failed";
  }
  return 0;  // giflib turns a short write into E_GIF_ERR_WRITE_FAILED
}

}  // namespace

uint8_t GifWriter::quantize(uint8_t r, uint8_t g, uint8_t b, int64_t x, int64_t y) {
  static const ChannelDither red(kRedLevels), green(kGreenLevels), blue(kBlueLevels);
  const int t = kBayer8[y & 7][x & 7];
  return static_cast<uint8_t>(red.level(r, t) * kGreenLevels * kBlueLevels +
                              green.level(g, t) * kBlueLevels + blue.level(b, t));
}

std::array<uint8_t, 3> GifWriter::palette_color(uint8_t index) {
  if (index >= kCubeColors) return {0, 0, 0};
  const int r = index / (kGreenLevels * kBlueLevels);
  const int g = index / kBlueLevels % kGreenLevels;
  const int b = index % kBlueLevels;
  return {level_value(r, kRedLevels), level_value(g, kGreenLevels), level_value(b, kBlueLevels)};
}

int GifWriter::delay_centiseconds(int64_t frame, double fps) {
  const double i = static_cast<double>(frame);
  return static_cast<int>(std::floor(100.0 * (i + 1) / fps + 0.5) -
                          std::floor(100.0 * i / fps + 0.5));
}

GifWriter::GifWriter(const std::string& path, int64_t width, int64_t height, double fps,
                     bool loop) {
  MIXPREC_CHECK(width >= 1 && height >= 1 && width <= kMaxSide && height <= kMaxSide,
                "[GifWriter] ", path, ": frame size must be in [1, ", kMaxSide, "], got ", width,
                "x", height);
  MIXPREC_CHECK(std::isfinite(fps) && fps >= 0.01 && fps <= 100, "[GifWriter] ", path,
                ": fps must be in [0.01, 100] (GIF delays are whole 1/100 s), got ", fps);
  state_ = std::make_unique<GifWriterState>(path, width, height, fps);
  GifWriterState& s = *state_;
  int error = 0;
  s.gif = EGifOpen(&s, write_output, &error);
  if (s.gif == nullptr) {
    const char* text = GifErrorString(error);
    s.abandon();
    throw Error(detail::concat("[GifWriter] ", path, ": cannot start the GIF: ",
                               text != nullptr ? text : "unknown giflib error"));
  }
  EGifSetGifVersion(s.gif, true);  // GIF89a: needed for delays and looping

  std::unique_ptr<ColorMapObject, MapObjectDeleter> map(GifMakeMapObject(256, nullptr));
  if (!map) s.fail("cannot allocate the palette");
  for (int i = 0; i < 256; ++i) {
    const auto c = palette_color(static_cast<uint8_t>(i));
    map->Colors[i] = GifColorType{c[0], c[1], c[2]};
  }
  // EGifPutScreenDesc copies the map.
  if (EGifPutScreenDesc(s.gif, static_cast<int>(width), static_cast<int>(height), 8, 0,
                        map.get()) == GIF_ERROR)
    s.fail("cannot write the header");
  if (loop) {
    // NETSCAPE2.0 application extension, sub-block {1, loop count 0 = forever (u16 LE)}.
    static const GifByteType kApp[11] = {'N', 'E', 'T', 'S', 'C', 'A', 'P', 'E', '2', '.', '0'};
    static const GifByteType kForever[3] = {1, 0, 0};
    if (EGifPutExtensionLeader(s.gif, APPLICATION_EXT_FUNC_CODE) == GIF_ERROR ||
        EGifPutExtensionBlock(s.gif, 11, kApp) == GIF_ERROR ||
        EGifPutExtensionBlock(s.gif, 3, kForever) == GIF_ERROR ||
        EGifPutExtensionTrailer(s.gif) == GIF_ERROR)
      s.fail("cannot write the loop extension");
  }
  s.indices.resize(static_cast<std::size_t>(width * height));
}

GifWriter::~GifWriter() {
  if (state_ && !state_->closed) state_->abandon();
}

int64_t GifWriter::frames() const { return state_->frames; }

void GifWriter::add_frame(const Tensor& image) {
  state_->check_usable("add_frame");
  add_frame(to_rgb8(image, "GifWriter"));
}

void GifWriter::add_frame(const Rgb8Image& image) {
  GifWriterState& s = *state_;
  s.check_usable("add_frame");
  MIXPREC_CHECK(image.height == s.height && image.width == s.width, "[GifWriter] ", s.path,
                ": frame ", s.frames, " is ", image.height, "x", image.width,
                ", expected the writer's ", s.height, "x", s.width);
  MIXPREC_CHECK(image.pixels.size() == static_cast<std::size_t>(s.height * s.width * 3),
                "[GifWriter] ", s.path, ": frame ", s.frames, " has ", image.pixels.size(),
                " bytes, expected ", s.height * s.width * 3);
  const uint8_t* p = image.pixels.data();
  for (int64_t y = 0; y < s.height; ++y)
    for (int64_t x = 0; x < s.width; ++x, p += 3)
      s.indices[static_cast<std::size_t>(y * s.width + x)] = quantize(p[0], p[1], p[2], x, y);

  GraphicsControlBlock gcb{};
  gcb.DisposalMode = DISPOSE_DO_NOT;  // every frame covers the whole screen anyway
  gcb.UserInputFlag = false;
  gcb.DelayTime = delay_centiseconds(s.frames, s.fps);
  gcb.TransparentColor = NO_TRANSPARENT_COLOR;
  GifByteType extension[4];
  EGifGCBToExtension(&gcb, extension);
  if (EGifPutExtension(s.gif, GRAPHICS_EXT_FUNC_CODE, 4, extension) == GIF_ERROR)
    s.fail("cannot write a frame's delay");
  if (EGifPutImageDesc(s.gif, 0, 0, static_cast<int>(s.width), static_cast<int>(s.height), false,
                       nullptr) == GIF_ERROR)
    s.fail("cannot write a frame's descriptor");
  for (int64_t y = 0; y < s.height; ++y)
    if (EGifPutLine(s.gif, s.indices.data() + y * s.width, static_cast<int>(s.width)) == GIF_ERROR)
      s.fail("cannot write a frame's pixels");
  ++s.frames;
}

void GifWriter::close() {
  GifWriterState& s = *state_;
  s.check_usable("close");
  MIXPREC_CHECK(s.frames >= 1, "[GifWriter] ", s.path, ": close() before any frame was added");
  int error = 0;
  // EGifCloseFile writes the trailer and frees the handle whatever happens; it does not report
  // a failed trailer write, so our callback's record is checked too.
  const int status = EGifCloseFile(s.gif, &error);
  s.gif = nullptr;
  if (status == GIF_ERROR || !s.write_error.empty()) {
    s.failed = true;
    s.file.discard();
    const char* text = GifErrorString(error);
    throw Error(detail::concat("[GifWriter] ", s.path, ": cannot finish the file: ",
                               !s.write_error.empty() ? s.write_error
                               : text != nullptr      ? text
                                                      : "unknown giflib error"));
  }
  try {
    s.file.commit();
  } catch (...) {
    s.failed = true;
    throw;
  }
  s.closed = true;
}

void write_gif(const std::string& path, const Tensor& frames, double fps, bool loop) {
  MIXPREC_CHECK(frames.defined() && frames.dim() == 4 && frames.size(0) >= 1, "[write_gif] ", path,
                ": expected frames [T, 3, H, W] (or uint8 [T, H, W, 3]) with T >= 1, got ",
                frames.defined() ? shape_to_string(frames.shape()) : std::string("undefined"));
  const bool u8 = frames.dtype() == DType::U8;
  MIXPREC_CHECK(u8 ? frames.size(3) == 3 : frames.size(1) == 3, "[write_gif] ", path,
                ": expected frames [T, 3, H, W] (or uint8 [T, H, W, 3]), got ",
                shape_to_string(frames.shape()), " of ", dtype_name(frames.dtype()));
  const int64_t h = u8 ? frames.size(1) : frames.size(2), w = u8 ? frames.size(2) : frames.size(3);
  GifWriter gif(path, w, h, fps, loop);
  for (int64_t t = 0; t < frames.size(0); ++t) gif.add_frame(frames[t]);
  gif.close();
}

}  // namespace mixprec::io
