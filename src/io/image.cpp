// Tensor -> RGB bytes: the one place that decides how images are laid out and how floats in
// [-1, 1] become bytes, shared by the PNG and GIF writers.
#include "mixprec/io/image.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mixprec/core/error.h"

namespace mixprec::io {

uint8_t float_to_byte(float value) {
  if (std::isnan(value)) return 0;
  const double v = std::clamp(static_cast<double>(value), -1.0, 1.0);
  // (v + 1) * 127.5 + 0.5 lies in [0.5, 255.5]: the floor is a byte.
  return static_cast<uint8_t>(std::min(255.0, std::floor((v + 1.0) * 127.5 + 0.5)));
}

Rgb8Image to_rgb8(const Tensor& image, const char* op) {
  MIXPREC_CHECK(image.defined(), "[", op, "] expected an image tensor, got an undefined tensor");
  const Shape& s = image.shape();
  Tensor hwc;  // (H, W, 3) view
  if (image.dtype() == DType::U8) {
    MIXPREC_CHECK(image.dim() == 3 && s[2] == 3, "[", op,
                  "] a uint8 image must be [H, W, 3], got shape ", shape_to_string(s));
    hwc = image;
  } else {
    MIXPREC_CHECK(is_floating(image.dtype()), "[", op,
                  "] an image must be floating ([3, H, W], [1, 3, H, W] or [H, W, 3] in [-1, 1]) "
                  "or uint8 [H, W, 3], got dtype ",
                  dtype_name(image.dtype()));
    if (image.dim() == 4 && s[0] == 1 && s[1] == 3) {
      hwc = image.select(0, 0).permute({1, 2, 0});
    } else if (image.dim() == 3 && s[0] == 3) {
      hwc = image.permute({1, 2, 0});
    } else if (image.dim() == 3 && s[2] == 3) {
      hwc = image;
    } else {
      MIXPREC_CHECK(false, "[", op,
                    "] expected an RGB image of shape [3, H, W], [1, 3, H, W] or [H, W, 3], got ",
                    shape_to_string(s));
    }
  }
  Rgb8Image out;
  out.height = hwc.size(0);
  out.width = hwc.size(1);
  MIXPREC_CHECK(out.height >= 1 && out.width >= 1, "[", op, "] the image is empty: shape ",
                shape_to_string(s));
  const std::size_t n = static_cast<std::size_t>(out.height * out.width * 3);
  out.pixels.resize(n);
  if (image.dtype() == DType::U8) {
    const Tensor c = hwc.contiguous();
    std::memcpy(out.pixels.data(), c.data_ptr(), n);
  } else {
    const Tensor c = hwc.to(DType::F32).contiguous();
    const float* p = c.data<float>();
    for (std::size_t i = 0; i < n; ++i) out.pixels[i] = float_to_byte(p[i]);
  }
  return out;
}

}  // namespace mixprec::io
