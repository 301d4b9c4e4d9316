#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/softmax.h"
#include "support/error_of.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Runs (log_)softmax and compares with an f64 reference computed line by line, with error
// scales that follow the kernel's arithmetic: exp(x - max) is off by ~|x - max| f32 roundings
// of its argument, the sum by the pairwise-summation bound.
void check(bool log, const Tensor& x, int64_t dim, DType out_dtype, const std::string& what,
           const Tensor& given_out = Tensor()) {
  SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + what + " " +
               shape_to_string(x.shape()) + " " + std::string(dtype_name(x.dtype())) + " dim " +
               std::to_string(dim) + " -> " + std::string(dtype_name(out_dtype)));
  const Tensor out = given_out.defined() ? given_out : Tensor::empty(x.shape(), out_dtype);
  const std::vector<double> xv = values(x);  // before the call: out may be x
  if (log)
    log_softmax(x, dim, out);
  else
    softmax(x, dim, out);
  const Shape& shape = x.shape();
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) outer *= shape[static_cast<std::size_t>(i)];
    if (i > d) inner *= shape[static_cast<std::size_t>(i)];
  }
  const int64_t len = shape[static_cast<std::size_t>(d)];
  std::vector<double> want(xv.size()), scale(xv.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t r) { return static_cast<std::size_t>((o * len + r) * inner + i); };
      double m = -kInf, s = 0;
      for (int64_t r = 0; r < len; ++r) m = std::max(m, xv[at(r)]);
      for (int64_t r = 0; r < len; ++r) s += std::exp(xv[at(r)] - m);
      for (int64_t r = 0; r < len; ++r) {
        const double shifted = xv[at(r)] - m;
        want[at(r)] = log ? shifted - std::log(s) : std::exp(shifted) / s;
        scale[at(r)] = log ? std::fabs(shifted) + std::fabs(std::log(s)) + 1
                           : std::fabs(want[at(r)]) * (1 + std::fabs(shifted));
      }
    }
  const DType compute =
      x.dtype() == DType::F64 || out_dtype == DType::F64 ? DType::F64 : DType::F32;
  const test_support::Tolerance tol = test_support::tolerance_for(out_dtype, compute);
  const std::vector<double> got = values(out);
  for (std::size_t i = 0, failures = 0; i < got.size() && failures < 5; ++i) {
    const double bound = tol.bound(want[i], test_support::pairwise_terms(len), scale[i]);
    if (!(std::fabs(got[i] - want[i]) <= bound))
      ++failures, ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", reference " << want[i]
                                << ", |diff| " << std::fabs(got[i] - want[i]) << " > bound "
                                << bound;
  }
}

class SoftmaxTest : public IsaTest {};

TEST_P(SoftmaxTest, RandomShapesEveryDimAndDtype) {
  Generator gen(41);
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{1}, 0},        {{7}, -1},        {{17, 63}, 1},     {{17, 63}, 0},
                        {{65, 129}, -1}, {{3, 17, 65}, 1}, {{3, 17, 65}, 0},  {{3, 17, 65}, 2},
                        {{2, 7, 1}, 1},  {{5, 1, 9}, 1},   {{2, 3, 4, 5}, 1}, {{4, 129, 17}, 1}};
  for (const Case& c : cases)
    for (bool log : {false, true})
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        const Tensor x = Tensor::uniform(c.shape, -8.0, 8.0, gen, t);
        check(log, x, c.dim, t, "random");
        if (t == DType::BF16) check(log, x, c.dim, DType::F32, "random, f32 out");
      }
}

TEST_P(SoftmaxTest, StridedInputsOutputsAndInPlace) {
  Generator gen(42);
  for (bool log : {false, true}) {
    const Tensor base = Tensor::uniform({65, 33}, -5.0, 5.0, gen, DType::BF16);
    check(log, base.t(), 1, DType::BF16, "transposed");
    check(log, base.t(), 0, DType::F32, "transposed");
    check(log, base.slice(0, 1, 65, 3), 1, DType::F32, "sliced");
    check(log, base.slice(1, 0, 1).expand({65, 7}), 1, DType::F32, "expanded (uniform rows)");
    const Tensor cl = Tensor::uniform({2, 17, 3, 5}, -5.0, 5.0, gen, DType::F32)
                          .contiguous(MemoryFormat::ChannelsLast);
    check(log, cl, 1, DType::F32, "channels_last over C");
    check(log, cl, 3, DType::F32, "channels_last over W",
          Tensor::empty({2, 17, 3, 5}, DType::F32, MemoryFormat::ChannelsLast));
    const Tensor x = Tensor::uniform({9, 17}, -5.0, 5.0, gen, DType::F32);
    check(log, x, 1, DType::F32, "in place", x);
    const Tensor y = Tensor::uniform({17, 9}, -5.0, 5.0, gen, DType::F32);
    check(log, y.t(), 1, DType::F32, "in place, transposed", y.t());
  }
}

TEST_P(SoftmaxTest, LargeInputsUseEveryThread) {
  Generator gen(43);
  for (bool log : {false, true}) {
    check(log, Tensor::uniform({301, 257}, -10.0, 10.0, gen, DType::BF16), 1, DType::BF16,
          "many rows");
    check(log, Tensor::uniform({3001, 37}, -10.0, 10.0, gen, DType::F16), 0, DType::F32,
          "long columns");
    check(log, Tensor::uniform({1, 50021}, -10.0, 10.0, gen, DType::F32), 1, DType::F32,
          "vocabulary-sized row");
  }
}

TEST_P(SoftmaxTest, F16TenThousandAndZeroIsOneAndZero) {
  // Named hard case: 10000 is fine in f16 and exp(10000) is never computed: the max is
  // subtracted first, so the result is exactly [1, 0], not NaN.
  const Tensor x = Tensor::from_vector<float>({10000.0f, 0.0f}).to(DType::F16);
  for (DType out_dtype : {DType::F16, DType::F32}) {
    const Tensor out = Tensor::empty({2}, out_dtype);
    softmax(x, 0, out);
    EXPECT_EQ(values(out), (std::vector<double>{1.0, 0.0})) << dtype_name(out_dtype);
    log_softmax(x, 0, out);
    EXPECT_EQ(values(out)[0], 0.0);
    EXPECT_EQ(values(out)[1], -10000.0);
  }
}

TEST_P(SoftmaxTest, MaskedPositionsAndSpecialRows) {
  const Tensor x =
      Tensor::from_vector<float>({1.0f, -INFINITY, 1.0f, -INFINITY,            // partly masked
                                  -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // fully masked
                                  1.0f, NAN, 2.0f, 3.0f,                       // NaN
                                  1.0f, INFINITY, 2.0f, 3.0f},                 // +inf
                                 {4, 4});
  const Tensor p = Tensor::empty({4, 4}), lp = Tensor::empty({4, 4});
  softmax(x, 1, p);
  log_softmax(x, 1, lp);
  const std::vector<double> pv = values(p), lv = values(lp);
  EXPECT_EQ(std::vector<double>(pv.begin(), pv.begin() + 4),
            (std::vector<double>{0.5, 0.0, 0.5, 0.0}));
  EXPECT_EQ(lv[1], -kInf);
  EXPECT_NEAR(lv[0], std::log(0.5), 1e-7);
  for (int i = 4; i < 16; ++i) {
    EXPECT_TRUE(std::isnan(pv[static_cast<std::size_t>(i)]))
        << "softmax element " << i << " = " << pv[static_cast<std::size_t>(i)];
    EXPECT_TRUE(std::isnan(lv[static_cast<std::size_t>(i)])) << "log_softmax element " << i;
  }
  softmax(x.t(), 0, p.t());  // the same rows through the column kernel
  EXPECT_EQ(values(p)[2], 0.5);
  EXPECT_TRUE(std::isnan(values(p)[4]));
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(SoftmaxTest);

using test_support::error_of;

TEST(Softmax, BadArgumentsAreClearErrors) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_EQ(error_of([&] {
              softmax(x, 1, Tensor::empty({3, 2}));
            }),
            "[softmax] out has shape [3, 2], expected [2, 3] (x's shape)");
  EXPECT_NE(error_of([&] {
              log_softmax(x, 2, Tensor::empty({2, 3}));
            }).find("[log_softmax]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              softmax(Tensor::zeros({2}, DType::I64), 0, Tensor::empty({2}));
            }).find("[softmax] x has dtype i64, expected a floating dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::kernels
