#include "mixprec/io/jpeg.h"

#include <turbojpeg.h>

#include <memory>

#include "mixprec/core/error.h"
#include "mixprec/io/image.h"

namespace mixprec::io {
namespace {

struct TurboJpegDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
struct TurboJpegBufferDeleter {
  void operator()(unsigned char* buffer) const { tjFree(buffer); }
};

}  // namespace

std::string encode_jpeg(const Tensor& image, int quality) {
  MIXPREC_CHECK(quality >= 1 && quality <= 100, "[encode_jpeg] quality must be 1..100, got ",
                quality);
  const Rgb8Image rgb = to_rgb8(image, "encode_jpeg");
  // A compressor per call: creating one costs microseconds, and the function stays safe to call
  // from any thread.
  const std::unique_ptr<void, TurboJpegDeleter> compressor(tjInitCompress());
  MIXPREC_CHECK(compressor != nullptr,
                "[encode_jpeg] tjInitCompress failed: ", tjGetErrorStr2(nullptr));
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int status =
      tjCompress2(compressor.get(), rgb.pixels.data(), static_cast<int>(rgb.width), 0,
                  static_cast<int>(rgb.height), TJPF_RGB, &jpeg, &size, TJSAMP_444, quality, 0);
  const std::unique_ptr<unsigned char, TurboJpegBufferDeleter> owned(jpeg);
  MIXPREC_CHECK(status == 0, "[encode_jpeg] ", tjGetErrorStr2(compressor.get()));
  return std::string(reinterpret_cast<const char*>(jpeg), size);
}

}  // namespace mixprec::io
