#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/conv.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

struct Case {
  int64_t n, c, h, w, o, kh, kw;
  Conv2dOptions opt{};
  DType x_dtype = DType::F32, w_dtype = DType::F32, out_dtype = DType::F32;
  MemoryFormat x_format = MemoryFormat::ChannelsLast, out_format = MemoryFormat::ChannelsLast;
  bool with_bias = true, with_residual = false;
};

std::string describe(const Case& c) {
  return "x [" + std::to_string(c.n) + ", " + std::to_string(c.c) + ", " + std::to_string(c.h) +
         ", " + std::to_string(c.w) + "] " + std::string(dtype_name(c.x_dtype)) + " " +
         std::string(memory_format_name(c.x_format)) + ", w [" + std::to_string(c.o) + ", " +
         std::to_string(c.c / c.opt.groups) + ", " + std::to_string(c.kh) + ", " +
         std::to_string(c.kw) + "] " + std::string(dtype_name(c.w_dtype)) + ", out " +
         std::string(dtype_name(c.out_dtype)) + " " +
         std::string(memory_format_name(c.out_format)) + ", stride " +
         std::to_string(c.opt.stride_h) + "x" + std::to_string(c.opt.stride_w) + " pad " +
         std::to_string(c.opt.pad_h) + "x" + std::to_string(c.opt.pad_w) + " dil " +
         std::to_string(c.opt.dilation_h) + " groups " + std::to_string(c.opt.groups) + " act " +
         std::to_string(static_cast<int>(c.opt.activation)) + (c.with_residual ? " residual" : "");
}

void check(Case cs, uint64_t seed) {
  SCOPED_TRACE(describe(cs));
  Generator gen(seed);
  const int64_t cg = cs.c / cs.opt.groups, og = cs.o / cs.opt.groups;
  const Tensor x =
      Tensor::uniform({cs.n, cs.c, cs.h, cs.w}, -1, 1, gen, cs.x_dtype).to(cs.x_format);
  const Tensor w = Tensor::uniform({cs.o, cg, cs.kh, cs.kw}, -1, 1, gen, cs.w_dtype);
  const Tensor b = Tensor::uniform({cs.o}, -1, 1, gen, DType::F32);
  const int64_t oh =
      conv_output_size(cs.h, cs.kh, cs.opt.stride_h, cs.opt.pad_h, cs.opt.dilation_h);
  const int64_t ow =
      conv_output_size(cs.w, cs.kw, cs.opt.stride_w, cs.opt.pad_w, cs.opt.dilation_w);
  const Tensor residual = Tensor::uniform({cs.n, cs.o, oh, ow}, -1, 1, gen, DType::BF16);
  if (cs.with_residual) cs.opt.residual = &residual;
  const Tensor out = Tensor::empty({cs.n, cs.o, oh, ow}, cs.out_dtype, cs.out_format);
  conv2d(x, w, cs.with_bias ? &b : nullptr, out, cs.opt);

  // f64 reference on the same rounded inputs.
  const Tensor x64 = x.to(DType::F64).contiguous(), w64 = w.to(DType::F64).contiguous();
  const Tensor r64 = residual.to(DType::F64).contiguous(), got = out.to(DType::F64).contiguous();
  const double* xp = x64.data<double>();
  const double* wp = w64.data<double>();
  const test_support::Tolerance tol = test_support::tolerance_for(cs.out_dtype);
  int failures = 0;
  for (int64_t n = 0; n < cs.n; ++n)
    for (int64_t o = 0; o < cs.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x_ = 0; x_ < ow && failures < 5; ++x_) {
          double acc = cs.with_bias ? b.value({o}) : 0.0, abs_sum = 1.0;
          const int64_t grp = o / og;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t ky = 0; ky < cs.kh; ++ky)
              for (int64_t kx = 0; kx < cs.kw; ++kx) {
                const int64_t iy = y * cs.opt.stride_h - cs.opt.pad_h + ky * cs.opt.dilation_h;
                const int64_t ix = x_ * cs.opt.stride_w - cs.opt.pad_w + kx * cs.opt.dilation_w;
                if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) continue;
                const double term = xp[((n * cs.c + grp * cg + c) * cs.h + iy) * cs.w + ix] *
                                    wp[((o * cg + c) * cs.kh + ky) * cs.kw + kx];
                acc += term;
                abs_sum += std::fabs(term);
              }
          double want = reference_activation(cs.opt.activation, acc);
          if (cs.with_residual) want += r64.data<double>()[((n * cs.o + o) * oh + y) * ow + x_];
          const double g = got.data<double>()[((n * cs.o + o) * oh + y) * ow + x_];
          const double bound = tol.bound(want, cg * cs.kh * cs.kw, abs_sum + 1.0);
          if (!(std::fabs(g - want) <= bound)) {
            ++failures;
            ADD_FAILURE() << "out[" << n << ", " << o << ", " << y << ", " << x_ << "] = " << g
                          << ", reference " << want << ", bound " << bound;
          }
        }
}

class ConvTest : public test_support::IsaTest {};

TEST_P(ConvTest, ThreeByThreeAllDtypesAndLayouts) {
  uint64_t seed = 1;
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (MemoryFormat f : {MemoryFormat::ChannelsLast, MemoryFormat::Contiguous}) {
      Case c{1, 17, 9, 7, 33, 3, 3};
      c.opt.pad_h = c.opt.pad_w = 1;
      c.x_dtype = c.w_dtype = c.out_dtype = t;
      c.x_format = c.out_format = f;
      check(c, seed++);
    }
}

TEST_P(ConvTest, StrideDilationPaddingAndOddSizes) {
  uint64_t seed = 20;
  for (const auto& [stride, pad, dil] :
       {std::tuple{2, 1, 1}, std::tuple{1, 2, 2}, std::tuple{3, 0, 1}}) {
    Case c{2, 7, 17, 13, 65, 3, 3};
    c.opt.stride_h = c.opt.stride_w = stride;
    c.opt.pad_h = c.opt.pad_w = pad;
    c.opt.dilation_h = c.opt.dilation_w = dil;
    c.x_dtype = c.w_dtype = DType::BF16;
    check(c, seed++);
  }
  Case rect{1, 3, 12, 20, 16, 5, 1};
  rect.opt.pad_h = 2;
  rect.opt.stride_w = 2;
  check(rect, seed++);
}

TEST_P(ConvTest, PointwiseIsOneGemmWithFusedEpilogue) {
  uint64_t seed = 40;
  for (Activation act : {Activation::None, Activation::SiLU, Activation::GeluTanh}) {
    Case c{2, 64, 8, 8, 129, 1, 1};
    c.opt.activation = act;
    c.with_residual = true;
    c.x_dtype = c.w_dtype = DType::BF16;
    c.out_dtype = DType::BF16;
    check(c, seed++);
  }
  Case nchw_out{1, 16, 5, 5, 8, 1, 1};
  nchw_out.out_format = MemoryFormat::Contiguous;
  check(nchw_out, seed++);
}

TEST_P(ConvTest, GroupedAndDepthwise) {
  uint64_t seed = 60;
  Case grouped{1, 12, 9, 9, 18, 3, 3};
  grouped.opt.groups = 3;
  grouped.opt.pad_h = grouped.opt.pad_w = 1;
  check(grouped, seed++);
  for (DType t : {DType::F32, DType::BF16}) {
    Case dw{2, 32, 10, 11, 32, 3, 3};
    dw.opt.groups = 32;
    dw.opt.pad_h = dw.opt.pad_w = 1;
    dw.opt.activation = Activation::ReLU;
    dw.with_residual = true;
    dw.x_dtype = dw.w_dtype = dw.out_dtype = t;
    check(dw, seed++);
  }
}

TEST_P(ConvTest, MixedF32InputBf16Weights) {
  Case c{1, 16, 8, 8, 32, 3, 3};
  c.opt.pad_h = c.opt.pad_w = 1;
  c.w_dtype = DType::BF16;
  check(c, 80);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvTest);

TEST(Conv, ClearErrors) {
  const Tensor x = Tensor::zeros({1, 4, 8, 8}), w = Tensor::zeros({8, 3, 3, 3});
  const Tensor out = Tensor::empty({1, 8, 6, 6});
  try {
    conv2d(x, w, nullptr, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[conv2d] weight [8, 3, 3, 3] expects 3 input channels"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 2, 2}), w, nullptr, out), Error)
      << "kernel larger than input";
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 8, 8}), w, nullptr, Tensor::empty({1, 8, 5, 5})), Error)
      << "wrong out";
}

}  // namespace
}  // namespace mixprec::kernels
