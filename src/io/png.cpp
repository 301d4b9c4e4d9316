// PNG through libpng.
//
// libpng reports errors by longjmp to a setjmp point. A longjmp that crosses a C++ frame with
// live destructors is undefined behaviour, so every libpng call that can fail runs inside a
// small function (encode_rows, decode_header, decode_rows) whose locals are all trivially
// destructible and which turns the longjmp into `return false`. The RAII owners of the png
// structs, the buffers and the output file live in the callers, outside the jump. The I/O
// callbacks never let a C++ exception into libpng: they record what went wrong and raise a
// libpng error instead, after leaving their own try block.
//
// Writing encodes into memory first, then hands the bytes to AtomicFile: the file system is
// touched only once the PNG is complete.
#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/image.h"

namespace mixprec::io {
namespace {

constexpr png_uint_32 kMaxWriteSide = 1000000;  // libpng's own default limit
constexpr png_uint_32 kMaxReadSide = 16384;
constexpr uint64_t kMaxReadPixels = uint64_t{1} << 26;  // 64 Mpx = 192 MiB of RGB
constexpr off_t kMaxFileBytes = off_t{1} << 30;

// libpng's message, kept for the exception thrown after the jump.
struct PngMessage {
  char text[256] = "unknown libpng error";
};

void on_error(png_structp png, png_const_charp message) {
  auto* out = static_cast<PngMessage*>(png_get_error_ptr(png));
  std::snprintf(out->text, sizeof out->text, "%s", message != nullptr ? message : "?");
  png_longjmp(png, 1);
}

// Warnings (a bad ancillary chunk, an sRGB profile quirk) do not make an image unusable.
void on_warning(png_structp, png_const_charp) {}

// libpng's write or read struct and its info struct, created and destroyed together.
enum class PngDirection { Write, Read };
template <PngDirection kDirection>
class PngStructs {
 public:
  explicit PngStructs(PngMessage* message) {
    png_ = kDirection == PngDirection::Write
               ? png_create_write_struct(PNG_LIBPNG_VER_STRING, message, on_error, on_warning)
               : png_create_read_struct(PNG_LIBPNG_VER_STRING, message, on_error, on_warning);
    if (png_ != nullptr) info_ = png_create_info_struct(png_);
  }
  ~PngStructs() {
    if constexpr (kDirection == PngDirection::Write)
      png_destroy_write_struct(&png_, &info_);
    else
      png_destroy_read_struct(&png_, &info_, nullptr);
  }
  PngStructs(const PngStructs&) = delete;
  PngStructs& operator=(const PngStructs&) = delete;
  bool ok() const { return png_ != nullptr && info_ != nullptr; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};
using PngWriter = PngStructs<PngDirection::Write>;
using PngReader = PngStructs<PngDirection::Read>;

// ---- writing ----

void write_to_memory(png_structp png, png_bytep data, size_t n) {
  auto* bytes = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    bytes->insert(bytes->end(), data, data + n);
  } catch (...) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory while encoding");
}

void flush_nothing(png_structp) {}

bool encode_rows(png_structp png, png_infop info, png_uint_32 width, png_uint_32 height,
                 png_bytepp rows, std::vector<uint8_t>* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, write_to_memory, flush_nothing);
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

// ---- reading ----

struct MemorySource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void read_from_memory(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<MemorySource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "unexpected end of file (truncated?)");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

struct DecodedHeader {
  png_uint_32 width, height;
  size_t rowbytes;
  int channels, bit_depth;
};

// Reads up to the image data and asks libpng for 8-bit RGB whatever the file holds.
bool decode_header(png_structp png, png_infop info, MemorySource* src, DecodedHeader* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, src, read_from_memory);
  png_set_user_limits(png, kMaxReadSide, kMaxReadSide);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->width = png_get_image_width(png, info);
  out->height = png_get_image_height(png, info);
  out->rowbytes = png_get_rowbytes(png, info);
  out->channels = png_get_channels(png, info);
  out->bit_depth = png_get_bit_depth(png, info);
  return true;
}

bool decode_rows(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, info);  // checks the chunks after the image data, up to IEND
  return true;
}

// The whole file, size-checked. An owned descriptor closes on every path.
std::vector<uint8_t> read_all(const std::string& path) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  MIXPREC_CHECK(f.fd >= 0, "[read_png] ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  MIXPREC_CHECK(::fstat(f.fd, &st) == 0, "[read_png] ", path,
                ": cannot stat: ", std::strerror(errno));
  MIXPREC_CHECK(S_ISREG(st.st_mode), "[read_png] ", path, ": not a regular file");
  MIXPREC_CHECK(st.st_size <= kMaxFileBytes, "[read_png] ", path, ": file of ", st.st_size,
                " bytes is larger than the 1 GiB limit");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    MIXPREC_CHECK(n >= 0, "[read_png] ", path, ": read failed: ", std::strerror(errno));
    if (n == 0) break;  // shrank while we read: parse what is there
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace

void write_png(const std::string& path, const Rgb8Image& image) {
  MIXPREC_CHECK(image.height >= 1 && image.width >= 1 && image.height <= kMaxWriteSide &&
                    image.width <= kMaxWriteSide,
                "[write_png] ", path, ": image size must be in [1, ", kMaxWriteSide, "], got ",
                image.height, "x", image.width);
  MIXPREC_CHECK(image.pixels.size() == static_cast<size_t>(image.height * image.width * 3),
                "[write_png] ", path, ": expected ", image.height * image.width * 3,
                " bytes for a ", image.height, "x", image.width, " RGB image, got ",
                image.pixels.size());
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  // libpng takes non-const row pointers but only reads them when writing.
  auto* base = const_cast<uint8_t*>(image.pixels.data());
  for (size_t y = 0; y < rows.size(); ++y)
    rows[y] = base + y * static_cast<size_t>(image.width) * 3;
  std::vector<uint8_t> encoded;
  encoded.reserve(image.pixels.size() / 2 + 1024);
  PngMessage message;
  PngWriter writer(&message);
  MIXPREC_CHECK(writer.ok(), "[write_png] ", path, ": cannot create the libpng writer");
  MIXPREC_CHECK(encode_rows(writer.png(), writer.info(), static_cast<png_uint_32>(image.width),
                            static_cast<png_uint_32>(image.height), rows.data(), &encoded),
                "[write_png] ", path, ": libpng: ", message.text);
  AtomicFile file(path, "write_png");
  file.write(encoded.data(), encoded.size());
  file.commit();
}

void write_png(const std::string& path, const Tensor& image) {
  write_png(path, to_rgb8(image, "write_png"));
}

Tensor read_png(const std::string& path) {
  const std::vector<uint8_t> bytes = read_all(path);
  MIXPREC_CHECK(bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0, "[read_png] ", path,
                ": not a PNG file (bad signature)");
  PngMessage message;
  PngReader reader(&message);
  MIXPREC_CHECK(reader.ok(), "[read_png] ", path, ": cannot create the libpng reader");
  MemorySource source{bytes.data(), bytes.size(), 0};
  DecodedHeader header{};
  MIXPREC_CHECK(decode_header(reader.png(), reader.info(), &source, &header), "[read_png] ", path,
                ": libpng: ", message.text);
  MIXPREC_CHECK(static_cast<uint64_t>(header.width) * header.height <= kMaxReadPixels,
                "[read_png] ", path, ": ", header.width, "x", header.height,
                " is more than the 64 Mpx limit");
  // The transforms above guarantee 8-bit RGB; anything else is a libpng surprise, not a file
  // problem, but it must not turn into an overrun either.
  MIXPREC_CHECK(header.channels == 3 && header.bit_depth == 8 &&
                    header.rowbytes == static_cast<size_t>(header.width) * 3,
                "[read_png] ", path, ": unsupported PNG layout after conversion (", header.channels,
                " channels, ", header.bit_depth, " bits)");
  Tensor out = Tensor::empty(
      {static_cast<int64_t>(header.height), static_cast<int64_t>(header.width), 3}, DType::U8);
  std::vector<png_bytep> rows(header.height);
  auto* base = out.data<uint8_t>();
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = base + y * header.rowbytes;
  MIXPREC_CHECK(decode_rows(reader.png(), reader.info(), rows.data()), "[read_png] ", path,
                ": libpng: ", message.text);
  return out;
}

}  // namespace mixprec::io
