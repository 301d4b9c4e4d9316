// conv2d's backward in f32 / bf16 / f16 (GEMMs on the operands' own dtypes, f32 accumulation,
// one rounding per gradient) against the same backward in f64, which the gradient checks of
// test_op_registry.cpp verify against finite differences. Each element's bound comes from the
// tolerance table with the sum of |terms| that formed it: the f64 backward of |x|, |w|, |dY|.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/mode/grad_mode.h"
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

// A residual of the output's dtype is added in the convolution's epilogue: rounded once (within
// half an ulp of conv + residual in f64, where adding afterwards rounds twice), the same bits
// with packed inference weights, and its gradient is the output's. One of another dtype is
// added after, with add's promotion.
TEST(ConvResidual, FusedRoundsOnceAndPassesTheGradient) {
  Generator gen(21);
  const Tensor x0 = Tensor::randn({2, 32, 9, 7}, gen), w0 = Tensor::randn({32, 32, 3, 3}, gen),
               b0 = Tensor::randn({32}, gen), r0 = Tensor::randn({2, 32, 9, 7}, gen);
  const Conv2dParams p{.padding = 1};
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = x0.to(dt).contiguous(MemoryFormat::ChannelsLast), w = w0.to(dt),
                 r = r0.to(dt).contiguous(MemoryFormat::ChannelsLast);
    Tensor fused, exact;
    {
      NoGrad off;
      fused = conv2d(x, w, b0, p, r);
      exact = add(conv2d(x.to(DType::F64), w.to(DType::F64), b0.to(DType::F64), p),
                  r.to(DType::F64));
      const Tensor packed_fused = conv2d(x, std::make_shared<const kernels::PackedConvWeights>(kernels::pack_conv_weights(w, dt)), b0, p, r);
      EXPECT_EQ(values(packed_fused), values(fused)) << "packed weights: the same bits";
    }
    EXPECT_EQ(fused.dtype(), dt);
    const std::vector<double> got = values(fused), want = values(exact);
    const double half_ulp = std::ldexp(1.0, -(info(dt).mantissa_bits + 1));
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - want[i]), half_ulp * std::fabs(want[i]) + 1e-4)
          << "element " << i;

    Tensor rg = r.detach();
    rg.requires_grad_();
    const Tensor g = Tensor::randn(fused.shape(), gen, dt);
    sum(mul(conv2d(x, w, b0, p, rg), g)).backward();
    EXPECT_EQ(values(rg.grad()), values(g));
  }
  // An f32 residual with a bf16 convolution: added after, the output promoted to f32.
  const Tensor mixed = conv2d(x0.to(DType::BF16), w0.to(DType::BF16), b0, p, r0);
  EXPECT_EQ(mixed.dtype(), DType::F32);
  EXPECT_EQ(values(mixed),
            values(add(conv2d(x0.to(DType::BF16), w0.to(DType::BF16), b0, p), r0)));
  // Per-channel offsets: one sample's fold into the bias (f32 sums, one rounding), a batch's
  // are broadcast by add().
  const Tensor offsets = Tensor::randn({2, 32, 1, 1}, gen);
  const Tensor one = x0.slice(0, 0, 1);
  EXPECT_EQ(values(conv2d(one, w0, b0, p, offsets.slice(0, 0, 1))),
            values(conv2d(one, w0, add(b0, offsets.slice(0, 0, 1).reshape({32})), p)));
  EXPECT_EQ(values(conv2d(x0, w0, b0, p, offsets)), values(add(conv2d(x0, w0, b0, p), offsets)));
  // Offsets of another dtype are added after at any batch: the result's dtype is add()'s.
  const Tensor one_bf16 = one.to(DType::BF16), w_bf16 = w0.to(DType::BF16);
  const Tensor promoted = conv2d(one_bf16, w_bf16, b0, p, offsets.slice(0, 0, 1));
  EXPECT_EQ(promoted.dtype(), DType::F32);
  EXPECT_EQ(values(promoted),
            values(add(conv2d(one_bf16, w_bf16, b0, p), offsets.slice(0, 0, 1))));
}

}  // namespace
}  // namespace mixprec
