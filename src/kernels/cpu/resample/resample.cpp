#include "mixprec/kernels/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"

namespace mixprec::kernels {
namespace {

// Arithmetic in f32, or f64 when the input is f64 (gradient checks).
template <typename T>
using acc_for = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
acc_for<T> load(const T* p) {
  return static_cast<acc_for<T>>(*p);
}
template <typename T, typename V>
void store(T* p, V v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    *p = static_cast<T>(v);
  else
    *p = T(static_cast<float>(v));  // Half / BFloat16: round to nearest even
}

// [N, C, H, W] element (n, c, y, x) of a 4-D tensor whose data pointer is `base`.
struct Indexer {
  int64_t s0, s1, s2, s3;
  explicit Indexer(const Tensor& t)
      : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  int64_t operator()(int64_t n, int64_t c, int64_t y, int64_t x) const {
    return n * s0 + c * s1 + y * s2 + x * s3;
  }
};

void check_pair(const char* op, const Tensor& x, const Tensor& out) {
  MIXPREC_CHECK(
      x.dim() == 4 && out.dim() == 4 && x.size(0) == out.size(0) && x.size(1) == out.size(1), "[",
      op, "] expected x [N, C, H, W] and out [N, C, OH, OW], got x ", shape_to_string(x.shape()),
      " and out ", shape_to_string(out.shape()));
  for (const Tensor* t : {&x, &out})
    MIXPREC_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16 ||
                      t->dtype() == DType::F16 || t->dtype() == DType::F64,
                  "[", op, "] expected f32, bf16, f16 or f64, got ", dtype_name(t->dtype()));
}

// Calls body(typed x pointer, typed out pointer) for the (x, out) dtype pair.
template <typename Body>
void visit_float_pair(const Tensor& x, const Tensor& out, const Body& body) {
  visit_dtype(x.dtype(), [&](auto xt) {
    using X = typename decltype(xt)::type;
    visit_dtype(out.dtype(), [&](auto ot) {
      using O = typename decltype(ot)::type;
      if constexpr (is_floating(dtype_of<X>) && is_floating(dtype_of<O>))
        body(x.data<X>(), out.data<O>());
    });
  });
}

Pool2dOptions resolve(const Pool2dOptions& o) {
  Pool2dOptions r = o;
  if (r.stride_h == 0) r.stride_h = r.kernel_h;
  if (r.stride_w == 0) r.stride_w = r.kernel_w;
  MIXPREC_CHECK(
      r.kernel_h >= 1 && r.kernel_w >= 1 && r.stride_h >= 1 && r.stride_w >= 1 && r.pad_h >= 0 &&
          r.pad_w >= 0 && 2 * r.pad_h <= r.kernel_h && 2 * r.pad_w <= r.kernel_w,
      "[pool2d] kernel and stride must be >= 1 and padding at most half the kernel, got kernel ",
      r.kernel_h, "x", r.kernel_w, " stride ", r.stride_h, "x", r.stride_w, " pad ", r.pad_h, "x",
      r.pad_w);
  return r;
}

void check_pool_out(const char* op, const Tensor& x, const Tensor& out, const Pool2dOptions& o) {
  check_pair(op, x, out);
  const Shape expected{x.size(0), x.size(1),
                       pool_output_size(x.size(2), o.kernel_h, o.stride_h, o.pad_h),
                       pool_output_size(x.size(3), o.kernel_w, o.stride_w, o.pad_w)};
  MIXPREC_CHECK(out.shape() == expected, "[", op, "] out has shape ", shape_to_string(out.shape()),
                ", expected ", shape_to_string(expected));
}

// Runs body(n, c, oy) over all output rows in parallel.
template <typename Body>
void for_each_output_row(const Tensor& out, const Body& body) {
  const int64_t n = out.size(0), c = out.size(1), oh = out.size(2);
  parallel_for(0, n * c * oh, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) body(r / (c * oh), r / oh % c, r % oh);
  });
}

}  // namespace

int64_t pool_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t out = (input + 2 * pad - kernel) / stride + 1;
  MIXPREC_CHECK(input + 2 * pad >= kernel, "[pool2d] window ", kernel, " does not fit input ",
                input, " with padding ", pad);
  return out;
}

void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dOptions& options) {
  const Pool2dOptions o = resolve(options);
  check_pool_out("avg_pool2d", x, out, o);
  const Indexer xi(x), oi(out);
  const int64_t h = x.size(2), w = x.size(3), ow = out.size(3);
  visit_float_pair(x, out, [&](const auto* xp, auto* op) {
    for_each_output_row(out, [&](int64_t n, int64_t c, int64_t oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        decltype(load(xp)) sum = 0;
        int64_t count = 0;
        for (int64_t ky = 0; ky < o.kernel_h; ++ky) {
          const int64_t iy = oy * o.stride_h - o.pad_h + ky;
          for (int64_t kx = 0; kx < o.kernel_w; ++kx) {
            const int64_t ix = ox * o.stride_w - o.pad_w + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            sum += load(xp + xi(n, c, iy, ix));
            ++count;
          }
        }
        const int64_t divisor = o.count_include_pad ? o.kernel_h * o.kernel_w : count;
        store(op + oi(n, c, oy, ox), sum / static_cast<decltype(sum)>(divisor));
      }
    });
  });
}

void max_pool2d(const Tensor& x, const Tensor& out, const Pool2dOptions& options,
                const Tensor* indices) {
  const Pool2dOptions o = resolve(options);
  check_pool_out("max_pool2d", x, out, o);
  if (indices != nullptr)
    MIXPREC_CHECK(indices->dtype() == DType::I64 && indices->shape() == out.shape(),
                  "[max_pool2d] indices must be i64 of out's shape ", shape_to_string(out.shape()));
  const Indexer xi(x), oi(out);
  const int64_t h = x.size(2), w = x.size(3), ow = out.size(3);
  int64_t* ip = indices != nullptr ? indices->data<int64_t>() : nullptr;
  const Indexer ii = indices != nullptr ? Indexer(*indices) : oi;
  visit_float_pair(x, out, [&](const auto* xp, auto* op) {
    for_each_output_row(out, [&](int64_t n, int64_t c, int64_t oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        decltype(load(xp)) best = -INFINITY;
        int64_t where = -1;
        for (int64_t ky = 0; ky < o.kernel_h; ++ky) {
          const int64_t iy = oy * o.stride_h - o.pad_h + ky;
          for (int64_t kx = 0; kx < o.kernel_w; ++kx) {
            const int64_t ix = ox * o.stride_w - o.pad_w + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const auto v = load(xp + xi(n, c, iy, ix));
            if (where < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
              best = v;
              where = iy * w + ix;
            }
          }
        }
        store(op + oi(n, c, oy, ox), best);
        if (ip != nullptr) ip[ii(n, c, oy, ox)] = where;
      }
    });
  });
}

namespace {

// Where output coordinate o (of `out_size`) reads from an input axis of `in_size`: the nearest
// index, or the two bilinear neighbours and the weight of the second. Computed once per axis
// with the per-element formulas (PyTorch's rules), so the inner loops only look them up.
struct AxisMap {
  std::vector<int64_t> lo, hi;
  std::vector<double> frac;
};

AxisMap axis_map(int64_t in_size, int64_t out_size, UpsampleMode mode) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  AxisMap m;
  m.lo.resize(static_cast<std::size_t>(out_size));
  m.hi.resize(static_cast<std::size_t>(out_size));
  m.frac.resize(static_cast<std::size_t>(out_size));
  for (int64_t o = 0; o < out_size; ++o) {
    const auto i = static_cast<std::size_t>(o);
    if (mode == UpsampleMode::Nearest) {
      m.lo[i] = m.hi[i] = std::min(
          in_size - 1, static_cast<int64_t>(std::floor(static_cast<double>(o) * scale)));
      m.frac[i] = 0.0;
    } else {  // half-pixel centres: src = (dst + 0.5) * scale - 0.5, clamped at 0
      const double f = std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5);
      m.lo[i] = std::min(in_size - 1, static_cast<int64_t>(f));
      m.hi[i] = std::min(in_size - 1, m.lo[i] + 1);
      m.frac[i] = f - static_cast<double>(m.lo[i]);
    }
  }
  return m;
}

}  // namespace

void upsample2d(const Tensor& x, const Tensor& out, UpsampleMode mode) {
  check_pair("upsample2d", x, out);
  const int64_t h = x.size(2), w = x.size(3), oh = out.size(2), ow = out.size(3);
  MIXPREC_CHECK(h >= 1 && w >= 1 && oh >= 1 && ow >= 1, "[upsample2d] empty spatial size: x ",
                shape_to_string(x.shape()), ", out ", shape_to_string(out.shape()));
  const Indexer xi(x), oi(out);
  const AxisMap ym = axis_map(h, oh, mode), xm = axis_map(w, ow, mode);
  const int64_t batch = out.size(0), channels = out.size(1);
  // Channels innermost in both (channels_last): walk pixels and copy or blend runs of channels,
  // instead of striding through one channel at a time.
  const bool channel_runs = x.stride(1) == 1 && out.stride(1) == 1 && channels > 1;
  // Nearest between channels-last tensors of one dtype is a copy of whole pixels: each output
  // row from its source row pixel by pixel, and a row whose source row is the previous output
  // row's (an integer scale) copied whole from it.
  if (mode == UpsampleMode::Nearest && x.dtype() == out.dtype() &&
      x.is_contiguous(MemoryFormat::ChannelsLast) && out.is_contiguous(MemoryFormat::ChannelsLast)) {
    const std::size_t pixel = static_cast<std::size_t>(channels) * x.element_size();
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    parallel_for(0, batch * oh, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = r / oh, oy = r % oh;
        char* row = dst + static_cast<std::size_t>(r * ow) * pixel;
        const auto sy = ym.lo[static_cast<std::size_t>(oy)];
        if (r > lo && oy > 0 && ym.lo[static_cast<std::size_t>(oy - 1)] == sy) {
          std::memcpy(row, row - static_cast<std::size_t>(ow) * pixel, static_cast<std::size_t>(ow) * pixel);
          continue;
        }
        const char* in = src + static_cast<std::size_t>((n * h + sy) * w) * pixel;
        for (int64_t ox = 0; ox < ow; ++ox)
          std::memcpy(row + static_cast<std::size_t>(ox) * pixel,
                      in + static_cast<std::size_t>(xm.lo[static_cast<std::size_t>(ox)]) * pixel, pixel);
      }
    });
    return;
  }
  visit_float_pair(x, out, [&](const auto* xp, auto* op) {
    using A = decltype(load(xp));
    // Output pixel (n, c, oy, ox) for channels [c0, c1): the same arithmetic in either order.
    auto pixel = [&](int64_t n, int64_t c0, int64_t c1, int64_t oy, int64_t ox) {
      const auto yi = static_cast<std::size_t>(oy), xj = static_cast<std::size_t>(ox);
      if (mode == UpsampleMode::Nearest) {
        for (int64_t c = c0; c < c1; ++c)
          store(op + oi(n, c, oy, ox), load(xp + xi(n, c, ym.lo[yi], xm.lo[xj])));
        return;
      }
      const A ly = static_cast<A>(ym.frac[yi]), lx = static_cast<A>(xm.frac[xj]);
      const int64_t y0 = ym.lo[yi], y1 = ym.hi[yi], x0 = xm.lo[xj], x1 = xm.hi[xj];
      for (int64_t c = c0; c < c1; ++c) {
        const A top = (1 - lx) * load(xp + xi(n, c, y0, x0)) + lx * load(xp + xi(n, c, y0, x1));
        const A bottom = (1 - lx) * load(xp + xi(n, c, y1, x0)) + lx * load(xp + xi(n, c, y1, x1));
        store(op + oi(n, c, oy, ox), (1 - ly) * top + ly * bottom);
      }
    };
    if (channel_runs) {
      parallel_for(0, batch * oh, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r)
          for (int64_t ox = 0; ox < ow; ++ox) pixel(r / oh, 0, channels, r % oh, ox);
      });
      return;
    }
    for_each_output_row(out, [&](int64_t n, int64_t c, int64_t oy) {
      for (int64_t ox = 0; ox < ow; ++ox) pixel(n, c, c + 1, oy, ox);
    });
  });
}

}  // namespace mixprec::kernels
