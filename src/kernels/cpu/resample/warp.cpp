// Backward warping by a per-pixel flow (bilinear, clamped), forward and adjoint. Scalar code:
// a 64x64 frame is a few thousand samples, far below the cost of the network that makes the flow.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/resample.h"

namespace mixprec::kernels {
namespace {

// Where one output pixel reads: the four neighbours, the weights of the second ones and whether
// the position was inside the frame along each axis (a clamped position does not move with the
// flow, so its derivative is 0).
template <typename A>
struct Taps {
  int64_t x0, x1, y0, y1;
  A ax, ay;
  bool free_x, free_y;
};

template <typename A>
Taps<A> taps(A sx, A sy, int64_t h, int64_t w) {
  Taps<A> t;
  const A max_x = static_cast<A>(w - 1), max_y = static_cast<A>(h - 1);
  // NaN flows sample the corner (0, 0) instead of indexing with garbage.
  t.free_x = sx >= 0 && sx <= max_x;
  t.free_y = sy >= 0 && sy <= max_y;
  sx = t.free_x ? sx : (sx > max_x ? max_x : 0);
  sy = t.free_y ? sy : (sy > max_y ? max_y : 0);
  t.x0 = static_cast<int64_t>(sx);  // sx >= 0: truncation is floor
  t.y0 = static_cast<int64_t>(sy);
  t.x1 = std::min(t.x0 + 1, w - 1);
  t.y1 = std::min(t.y0 + 1, h - 1);
  t.ax = sx - static_cast<A>(t.x0);
  t.ay = sy - static_cast<A>(t.y0);
  return t;
}

struct Strides {
  int64_t s0, s1, s2, s3;
  explicit Strides(const Tensor& t)
      : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  int64_t at(int64_t n, int64_t c, int64_t y, int64_t x) const {
    return n * s0 + c * s1 + y * s2 + x * s3;
  }
};

// The taps of output pixel (n, y, px): its own position moved by the flow there.
template <typename A>
Taps<A> taps_at(const A* flow, const Strides& fs, int64_t n, int64_t y, int64_t px, int64_t h,
                int64_t w) {
  return taps<A>(static_cast<A>(px) + flow[fs.at(n, 0, y, px)],
                 static_cast<A>(y) + flow[fs.at(n, 1, y, px)], h, w);
}

// Calls body(x's typed data, A{}) for a floating x, A its accumulation type (f64 for f64).
template <typename Body>
void visit_floating(const Tensor& x, const Body& body) {
  visit_dtype(x.dtype(), [&](auto xt) {
    using X = typename decltype(xt)::type;
    if constexpr (is_floating(dtype_of<X>))
      body(x.data<X>(), std::conditional_t<std::is_same_v<X, double>, double, float>{});
  });
}

DType accumulation_dtype(const Tensor& x) {
  return x.dtype() == DType::F64 ? DType::F64 : DType::F32;
}

void check_warp(const char* op, const Tensor& x, const Tensor& flow,
                std::initializer_list<const Tensor*> same_as_x) {
  MIXPREC_CHECK(x.dim() == 4 && flow.dim() == 4 && flow.size(0) == x.size(0) &&
                    flow.size(1) == 2 && flow.size(2) == x.size(2) && flow.size(3) == x.size(3),
                "[", op, "] expected x [N, C, H, W] and flow [N, 2, H, W], got x ",
                shape_to_string(x.shape()), " and flow ", shape_to_string(flow.shape()));
  MIXPREC_CHECK(is_floating(x.dtype()), "[", op, "] expected a floating x, got ",
                dtype_name(x.dtype()));
  const DType acc = accumulation_dtype(x);
  MIXPREC_CHECK(flow.dtype() == acc, "[", op, "] flow must be ", dtype_name(acc), " for ",
                dtype_name(x.dtype()), " x, got ", dtype_name(flow.dtype()));
  for (const Tensor* t : same_as_x)
    MIXPREC_CHECK(t->shape() == x.shape(), "[", op, "] expected ", shape_to_string(x.shape()),
                  ", got ", shape_to_string(t->shape()));
}

}  // namespace

void warp2d(const Tensor& x, const Tensor& flow, const Tensor& out) {
  check_warp("warp2d", x, flow, {&out});
  MIXPREC_CHECK(out.dtype() == accumulation_dtype(x), "[warp2d] out must be ",
                dtype_name(accumulation_dtype(x)), ", got ", dtype_name(out.dtype()));
  const int64_t batch = x.size(0), channels = x.size(1), h = x.size(2), w = x.size(3);
  const Strides xs(x), fs(flow), os(out);
  visit_floating(x, [&](const auto* xp, auto zero) {
    using A = decltype(zero);
    const A* fp = flow.data<A>();
    A* op = out.data<A>();
    parallel_for(0, batch * h, 4, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = r / h, y = r % h;
        for (int64_t px = 0; px < w; ++px) {
          const Taps<A> t = taps_at(fp, fs, n, y, px, h, w);
          for (int64_t c = 0; c < channels; ++c) {
            auto v = [&](int64_t yy, int64_t xx) { return static_cast<A>(xp[xs.at(n, c, yy, xx)]); };
            const A top = (1 - t.ax) * v(t.y0, t.x0) + t.ax * v(t.y0, t.x1);
            const A bottom = (1 - t.ax) * v(t.y1, t.x0) + t.ax * v(t.y1, t.x1);
            op[os.at(n, c, y, px)] = (1 - t.ay) * top + t.ay * bottom;
          }
        }
      }
    });
  });
}

void warp2d_backward(const Tensor& grad, const Tensor& x, const Tensor& flow, const Tensor& dx,
                     const Tensor& dflow) {
  check_warp("warp2d_backward", x, flow, {&grad, &dx});
  const DType acc = accumulation_dtype(x);
  MIXPREC_CHECK(grad.dtype() == acc && dx.dtype() == acc && dflow.dtype() == acc &&
                    dflow.shape() == flow.shape(),
                "[warp2d_backward] grad, dx and dflow must be ", dtype_name(acc),
                " and dflow of flow's shape");
  const int64_t batch = x.size(0), channels = x.size(1), h = x.size(2), w = x.size(3);
  const Strides xs(x), fs(flow), gs(grad), ds(dx), dfs(dflow);
  visit_floating(x, [&](const auto* xp, auto zero) {
    using A = decltype(zero);
    const A* fp = flow.data<A>();
    const A* gp = grad.data<A>();
    A* dxp = dx.data<A>();
    A* dfp = dflow.data<A>();
    // One sample per task: the scatter into dx stays inside the sample, so no two threads
    // add to the same element and the sums come out in one order, whatever the threads.
    parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t px = 0; px < w; ++px) {
            const Taps<A> t = taps_at(fp, fs, n, y, px, h, w);
            A d_sx = 0, d_sy = 0;
            for (int64_t c = 0; c < channels; ++c) {
              const A g = gp[gs.at(n, c, y, px)];
              auto v = [&](int64_t yy, int64_t xx) {
                return static_cast<A>(xp[xs.at(n, c, yy, xx)]);
              };
              const A v00 = v(t.y0, t.x0), v01 = v(t.y0, t.x1), v10 = v(t.y1, t.x0),
                      v11 = v(t.y1, t.x1);
              d_sx += g * ((1 - t.ay) * (v01 - v00) + t.ay * (v11 - v10));
              d_sy += g * ((1 - t.ax) * (v10 - v00) + t.ax * (v11 - v01));
              dxp[ds.at(n, c, t.y0, t.x0)] += g * (1 - t.ay) * (1 - t.ax);
              dxp[ds.at(n, c, t.y0, t.x1)] += g * (1 - t.ay) * t.ax;
              dxp[ds.at(n, c, t.y1, t.x0)] += g * t.ay * (1 - t.ax);
              dxp[ds.at(n, c, t.y1, t.x1)] += g * t.ay * t.ax;
            }
            dfp[dfs.at(n, 0, y, px)] = t.free_x ? d_sx : 0;
            dfp[dfs.at(n, 1, y, px)] = t.free_y ? d_sy : 0;
          }
    });
  });
}

}  // namespace mixprec::kernels
