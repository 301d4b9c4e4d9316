// The im2col walker (conv_internal.h).
#include "conv_internal.h"

#include <cstddef>
#include <cstring>

namespace mixprec::kernels::conv_detail {

void gather_patch_rows(const Tensor& xs, const Conv2dOptions& opt, const Geometry& g, int64_t grp,
                       int64_t p0, int64_t p1, void* rows) {
  const std::size_t es = xs.element_size();
  const int64_t k = g.k();
  const std::size_t run = static_cast<std::size_t>(g.cg) * es;
  const char* xp = static_cast<const char*>(xs.data_ptr());
  // A kernel row inside the image is one run of x: KW * C contiguous elements.
  const bool whole_rows =
      g.groups == 1 && opt.dilation_w == 1 && xs.stride(3) == g.c && g.scale_shift == 0;
  for (int64_t pix = p0; pix < p1; ++pix) {
    const int64_t n = pix / (g.oh * g.ow), oy = pix / g.ow % g.oh, ox = pix % g.ow;
    char* row = static_cast<char*>(rows) + static_cast<std::size_t>((pix - p0) * k) * es;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * opt.stride_h - opt.pad_h + ky * opt.dilation_h;
      const int64_t ix0 = ox * opt.stride_w - opt.pad_w;
      if (whole_rows && iy >= 0 && iy < g.h && ix0 >= 0 && ix0 + g.kw <= g.w) {
        const int64_t offset = n * xs.stride(0) + iy * xs.stride(2) + ix0 * xs.stride(3);
        std::memcpy(row + static_cast<std::size_t>(ky * g.kw * g.cg) * es,
                    xp + static_cast<std::size_t>(offset) * es,
                    run * static_cast<std::size_t>(g.kw));
        continue;
      }
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = ix0 + kx * opt.dilation_w;
        char* cell = row + static_cast<std::size_t>((ky * g.kw + kx) * g.cg) * es;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) {
          std::memset(cell, 0, run);
        } else {
          const int64_t offset = n * xs.stride(0) + (iy >> g.scale_shift) * xs.stride(2) +
                                 (ix >> g.scale_shift) * xs.stride(3) + grp * g.cg;
          std::memcpy(cell, xp + static_cast<std::size_t>(offset) * es, run);
        }
      }
    }
  }
}

}  // namespace mixprec::kernels::conv_detail
