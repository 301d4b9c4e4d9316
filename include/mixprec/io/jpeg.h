#pragma once
// JPEG output through libjpeg-turbo (TurboJPEG API), for live views: a 64x64 frame encodes in
// tens of microseconds, so a server can encode each frame once and send the bytes to everyone.
#include <string>

#include "mixprec/core/tensor.h"

namespace mixprec::io {

// An RGB image as io/image.h accepts it (floating [3, H, W] or [1, 3, H, W] in [-1, 1], or
// uint8 [H, W, 3]), bytes mapped as the PNG and GIF writers map them, as a baseline JPEG of
// the given quality (1..100) without chroma subsampling: frames this small are mostly edges,
// and 4:2:0 would smear every coloured outline. Throws Error("[encode_jpeg] ...").
std::string encode_jpeg(const Tensor& image, int quality = 92);

}  // namespace mixprec::io
