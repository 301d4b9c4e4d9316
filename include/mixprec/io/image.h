#pragma once
// Image and animation output: PNG (libpng) and streaming animated GIF (giflib), for looking at
// what the video model generates, and PNG reading for tests and tools.
//
// Images a function here accepts ("an RGB image"):
//   - a floating tensor (f64, f32, f16, bf16) of shape [3, H, W], [1, 3, H, W] or [H, W, 3]
//     (a 3-D shape whose first size is 3 is read as [3, H, W]), any strides (channels_last
//     included), values in [-1, 1] (the diffusion model's range);
//   - a uint8 tensor [H, W, 3] of bytes, used as is.
// Float to byte: byte = floor((clamp(v, -1, 1) + 1) * 127.5 + 0.5), computed in double from
// the value widened to f32: -1 -> 0, 1 -> 255, 0 -> 128 (ties round up), values outside
// [-1, 1] clamp, NaN -> 0. The inverse v = byte / 127.5 - 1 maps back to the same byte, also
// after rounding to f16 or bf16 (whose spacing near 1 is below one byte step).
//
// Every writer is atomic (io/atomic_file.h): the bytes go to a temporary next to the target
// and are renamed into place only when complete, so a failure never leaves a partial file.
//
// Errors throw mixprec::Error naming the operation: "[write_png] out.png: ...".
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::io {

struct GifWriterState;  // defined in src/io/gif_writer.cpp

// An RGB image as bytes, rows top to bottom, pixels (r, g, b): height * width * 3 bytes.
struct Rgb8Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;
};

// Converts an RGB image (see above) to bytes. `op` names the caller in error messages.
Rgb8Image to_rgb8(const Tensor& image, const char* op = "to_rgb8");

// The byte mapping above for one value.
uint8_t float_to_byte(float value);

// Writes an RGB image as an 8-bit RGB PNG (no interlacing, zlib default level).
void write_png(const std::string& path, const Tensor& image);
void write_png(const std::string& path, const Rgb8Image& image);

// Reads any PNG libpng reads (palette, grey, 16-bit, alpha, interlaced) as uint8 [H, W, 3]:
// palettes expand, grey replicates, 16-bit keeps the high byte, alpha is dropped (not
// composited). Corrupt, truncated or oversized (over 16384 per side) files throw.
Tensor read_png(const std::string& path);

// A streaming animated GIF writer: frames are quantised and compressed as they arrive, so a
// 500-frame video never sits in memory.
//
// Palette: one global palette, a fixed 6 x 7 x 6 RGB cube (6 levels of red and blue, 7 of
// green, where the eye resolves more; 252 colours, the 4 spare entries unused), with 8 x 8
// ordered (Bayer) dithering. Why not per-frame median cut or Floyd-Steinberg: a fixed palette
// needs no look-ahead and no per-frame colour table; ordered dithering is a pure function of
// (pixel, position), so a region that stays still between frames stays bit-identical instead
// of shimmering as diffused error would, and it is cheap and deterministic. Each channel picks
// one of the two cube levels around its value with the probability that preserves the mean,
// so bytes that are cube values (0, 255, ...) come out exact. The cost is visible grain: a
// pixel is off by less than one cube step (51 for red and blue, 42.5 for green, out of 255),
// while averages over a few pixels stay within a few units.
//
// Timing: GIF delays are whole hundredths of a second. Frame i (from 0) waits
// round(100 (i + 1) / fps) - round(100 i / fps) hundredths, so delays alternate (30 fps:
// 3, 3, 4, ...) and the total stays within half a hundredth of the true duration. fps must be
// in (0, 100]; note that browsers slow down frames shorter than 2/100 s (fps above 50).
//
// Atomic: the file appears at `path` only when close() succeeds. Destroying a writer without
// close(), or after any failure, removes the temporary and leaves no file.
//
//   io::GifWriter gif("video.gif", 64, 64, /*fps=*/25);
//   for (...) gif.add_frame(frame);  // [3, 64, 64] in [-1, 1]
//   gif.close();
class GifWriter {
 public:
  // `loop`: repeat forever (the NETSCAPE2.0 extension); otherwise play once.
  GifWriter(const std::string& path, int64_t width, int64_t height, double fps, bool loop = true);
  ~GifWriter();
  GifWriter(const GifWriter&) = delete;
  GifWriter& operator=(const GifWriter&) = delete;

  // Appends one frame: an RGB image (see above) of exactly height x width.
  void add_frame(const Tensor& image);
  void add_frame(const Rgb8Image& image);
  // Finishes the file and renames it into place. At least one frame must have been added.
  void close();

  int64_t frames() const;
  // The delay (1/100 s) frame i gets: the rounding rule above.
  static int delay_centiseconds(int64_t frame, double fps);
  // The palette index and colour of a byte triple at pixel (x, y) under the dithering above.
  static uint8_t quantize(uint8_t r, uint8_t g, uint8_t b, int64_t x, int64_t y);
  static std::array<uint8_t, 3> palette_color(uint8_t index);

 private:
  std::unique_ptr<GifWriterState> state_;
};

// A whole clip at once: frames [T, 3, H, W] (floating, any strides) or uint8 [T, H, W, 3],
// T >= 1, through GifWriter (same palette, timing and atomicity).
void write_gif(const std::string& path, const Tensor& frames, double fps, bool loop = true);

}  // namespace mixprec::io
