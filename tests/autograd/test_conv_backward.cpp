// conv2d's backward in f32 / bf16 / f16 (GEMMs on the operands' own dtypes, f32 accumulation,
// one rounding per gradient) against the same backward in f64, which the gradient checks of
// test_op_registry.cpp verify against finite differences. Each element's bound comes from the
// tolerance table with the sum of |terms| that formed it: the f64 backward of |x|, |w|, |dY|.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/autograd/grad_mode.h"
#include "mixprec/core/random.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/reduce.h"
#include "support/tolerance.h"

namespace mixprec {
namespace {

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor abs(const Tensor& t) {  // f64 in, f64 out
  Tensor c = t.detach().contiguous().clone();
  double* p = c.data<double>();
  for (int64_t i = 0; i < c.numel(); ++i) p[i] = std::fabs(p[i]);
  return c;
}

struct Grads {
  Tensor dx, dw, db;
};

Grads backward_of(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g,
                  const Conv2dParams& p, DType dt, bool channels_last) {
  Tensor x = x0.to(dt).detach(), w = w0.to(dt).detach(), b = b0.to(DType::F32).detach();
  if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast).detach();
  if (dt == DType::F64) b = b0.detach();
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  Tensor y = conv2d(x, w, b, p);
  Tensor gd = g.to(y.dtype());
  if (channels_last) gd = gd.contiguous(MemoryFormat::ChannelsLast);
  sum(mul(y, gd)).backward();
  return {x.grad(), w.grad(), b.grad()};
}

void expect_close(const Tensor& got, const Tensor& ref, const Tensor& abs_ref, int64_t terms,
                  const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  const std::vector<double> v = values(got), r = values(ref), a = values(abs_ref);
  const test_support::Tolerance tol = test_support::tolerance_for(got.dtype());
  int bad = 0;
  for (std::size_t i = 0; i < v.size() && bad < 5; ++i)
    if (!(std::fabs(v[i] - r[i]) <= tol.bound(r[i], terms, a[i]))) {
      ++bad;
      ADD_FAILURE() << what << " at " << i << ": got " << v[i] << ", want " << r[i] << " (bound "
                    << tol.bound(r[i], terms, a[i]) << ")";
    }
}

TEST(ConvBackward, MatchesF64InEveryDtypeLayoutAndGeometry) {
  struct Case {
    int64_t n, c, h, w, o, k;
    Conv2dParams p;
  };
  const Case cases[] = {
      {2, 8, 9, 7, 16, 3, {1, 1, 1, 1}},    // the U-Net's 3x3: dX as a convolution of dY
      {1, 5, 6, 6, 7, 3, {1, 0, 1, 1}},     // no padding
      {2, 6, 11, 9, 4, 3, {2, 1, 1, 1}},    // strided: col2im
      {1, 8, 10, 10, 12, 3, {1, 2, 2, 2}},  // dilated, grouped
      {2, 6, 5, 5, 6, 3, {1, 1, 1, 6}},     // depthwise
      {3, 24, 4, 5, 40, 1, {1, 0, 1, 1}},   // pointwise: dW straight from x
      {1, 3, 8, 8, 5, 5, {1, 2, 1, 1}},     // 5x5
  };
  Generator gen(17);
  for (const Case& cs : cases) {
    const Tensor x = Tensor::randn({cs.n, cs.c, cs.h, cs.w}, gen, DType::F64);
    const Tensor w = Tensor::randn({cs.o, cs.c / cs.p.groups, cs.k, cs.k}, gen, DType::F64);
    const Tensor b = Tensor::randn({cs.o}, gen, DType::F64);
    Tensor y0;
    {
      NoGrad off;
      y0 = conv2d(x, w, b, cs.p);
    }
    const Tensor g = Tensor::randn(y0.shape(), gen, DType::F64);
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (bool cl : {false, true}) {
        // The reference sees the inputs as rounded to dt.
        const Tensor xr = x.to(dt).to(DType::F64), wr = w.to(dt).to(DType::F64),
                     gr = g.to(dt).to(DType::F64);
        const Grads got = backward_of(x, w, b, g, cs.p, dt, cl);
        const Grads ref = backward_of(xr, wr, b, gr, cs.p, DType::F64, false);
        const Grads mag = backward_of(abs(xr), abs(wr), b, abs(gr), cs.p, DType::F64, false);
        const std::string what = std::string(dtype_name(dt)) + (cl ? " channels_last" : " nchw") +
                                 " k" + std::to_string(cs.k) + " s" + std::to_string(cs.p.stride) +
                                 " g" + std::to_string(cs.p.groups);
        EXPECT_EQ(got.dx.dtype(), dt);
        EXPECT_EQ(got.dw.dtype(), dt);
        const int64_t pixels = y0.size(0) * y0.size(2) * y0.size(3);
        expect_close(got.dx, ref.dx, mag.dx, cs.o * cs.k * cs.k, what + " dx");
        expect_close(got.dw, ref.dw, mag.dw, pixels, what + " dw");
        expect_close(got.db, ref.db, mag.db, pixels, what + " db");
      }
  }
}

}  // namespace
}  // namespace mixprec
