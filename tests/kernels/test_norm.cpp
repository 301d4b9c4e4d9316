#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/norm.h"
#include "support/error_of.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

double activation_ref(Activation act, double x) {
  switch (act) {
    case Activation::None:
      return x;
    case Activation::ReLU:
      return x > 0 ? x : 0.0;
    case Activation::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::SiLU:
      return x / (1.0 + std::exp(-x));
  }
  return NAN;
}

// The f64 reference of one normalised group: `members` are element indices into the
// row-major x, `param[i]` the index of element i's weight/bias entry (or -1 for none).
struct Expected {
  std::vector<double> value, scale;
  std::vector<double> mean, rstd;  // one per group
  int64_t group_len = 0;
};

void normalise_group(const std::vector<double>& xv, const std::vector<int64_t>& members,
                     const std::vector<int64_t>& param, const std::vector<double>& w,
                     const std::vector<double>& b, bool rms, double eps, Activation act,
                     Expected& e) {
  double s = 0, abs_s = 0;
  for (int64_t i : members)
    s += rms ? xv[static_cast<std::size_t>(i)] * xv[static_cast<std::size_t>(i)]
             : xv[static_cast<std::size_t>(i)],
        abs_s += std::fabs(xv[static_cast<std::size_t>(i)]);
  const auto n = static_cast<double>(members.size());
  const double mu = s / n;
  double var = 0;
  for (int64_t i : members)
    var += (xv[static_cast<std::size_t>(i)] - mu) * (xv[static_cast<std::size_t>(i)] - mu);
  var /= n;
  const double rstd = 1.0 / std::sqrt((rms ? mu : var) + eps);
  e.mean.push_back(mu);
  e.rstd.push_back(rstd);
  e.group_len = static_cast<int64_t>(members.size());
  for (int64_t i : members) {
    const auto k = static_cast<std::size_t>(i);
    const double wk = param[k] < 0 || w.empty() ? 1.0 : w[static_cast<std::size_t>(param[k])];
    const double bk = param[k] < 0 || b.empty() ? 0.0 : b[static_cast<std::size_t>(param[k])];
    const double y = (xv[k] - (rms ? 0.0 : mu)) * rstd;
    e.value[k] = activation_ref(act, y * wk + bk);
    // The statistics' f32 error moves y by about (|x| / sigma) roundings of the group's sums
    // (|x| / sigma = mean|x| * rstd, large when the mean is large against the spread).
    e.scale[k] = (std::fabs(y) + 1 + abs_s / n * rstd) * std::fabs(wk) + std::fabs(bk);
  }
}

void compare(const Tensor& out, const Expected& e, DType compute, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<double> got = values(out);
  ASSERT_EQ(got.size(), e.value.size());
  const test_support::Tolerance tol = test_support::tolerance_for(out.dtype(), compute);
  for (std::size_t i = 0, failures = 0; i < got.size() && failures < 5; ++i) {
    const double bound =
        tol.bound(e.value[i], test_support::pairwise_terms(e.group_len), e.scale[i]);
    if (!(std::fabs(got[i] - e.value[i]) <= bound))
      ++failures, ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", reference " << e.value[i]
                                << ", |diff| " << std::fabs(got[i] - e.value[i]) << " > bound "
                                << bound;
  }
}

void compare_stats(const NormStats& stats, const Expected& e, const std::string& what) {
  SCOPED_TRACE(what + " stats");
  const std::vector<double> mean = values(stats.mean), rstd = values(stats.rstd);
  ASSERT_EQ(mean.size(), e.mean.size());
  for (std::size_t i = 0; i < mean.size(); ++i) {
    EXPECT_NEAR(mean[i], e.mean[i], 1e-5 * (1 + std::fabs(e.mean[i])));
    EXPECT_NEAR(rstd[i], e.rstd[i], 1e-5 * e.rstd[i]);
  }
}

DType compute_of(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() == DType::F64) return DType::F64;
  return DType::F32;
}

// Without statistics (`with_stats` false) the call is an inference one, which may take the
// narrow-row path (a few elements per row, transposed into channel rows).
void check_layer_norm(bool rms, const Tensor& x, const Shape& normalized, const Tensor& w,
                      const Tensor& b, DType out_dtype, const std::string& what,
                      bool with_stats = true) {
  const std::string trace = std::string(rms ? "rms_norm " : "layer_norm ") + what + " x " +
                            shape_to_string(x.shape()) + " " + std::string(dtype_name(x.dtype())) +
                            " -> " + std::string(dtype_name(out_dtype));
  const Tensor out = Tensor::empty(x.shape(), out_dtype);
  const Shape leading(x.shape().begin(),
                      x.shape().end() - static_cast<std::ptrdiff_t>(normalized.size()));
  const NormStats stats = with_stats ? NormStats{Tensor::empty(leading), Tensor::empty(leading)}
                                     : NormStats{};
  if (rms)
    rms_norm(x, normalized, w, 1e-5, out, stats);
  else
    layer_norm(x, normalized, w, b, 1e-5, out, stats);
  const std::vector<double> xv = values(x);
  const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>{};
  const std::vector<double> bv = b.defined() && !rms ? values(b) : std::vector<double>{};
  int64_t len = 1;
  for (int64_t s : normalized) len *= s;
  Expected e;
  e.value.resize(xv.size());
  e.scale.resize(xv.size());
  for (int64_t row = 0; row * len < static_cast<int64_t>(xv.size()); ++row) {
    std::vector<int64_t> members, param(xv.size(), -1);
    for (int64_t i = 0; i < len; ++i)
      members.push_back(row * len + i), param[static_cast<std::size_t>(row * len + i)] = i;
    normalise_group(xv, members, param, wv, bv, rms, 1e-5, Activation::None, e);
  }
  compare(out, e, compute_of({&x, &w, &b, &out}), trace);
  if (with_stats) compare_stats(stats, e, trace);
}

void check_group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b,
                      Activation act, DType out_dtype, MemoryFormat out_format,
                      const std::string& what) {
  const std::string trace = "group_norm " + what + " x " + shape_to_string(x.shape()) + " " +
                            std::string(dtype_name(x.dtype())) + " groups " +
                            std::to_string(groups) + " act " +
                            std::to_string(static_cast<int>(act));
  const Tensor out = Tensor::empty(x.shape(), out_dtype, out_format);
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c), per_group = c / groups;
  const NormStats stats{Tensor::empty({n, groups}), Tensor::empty({n, groups}, DType::F64)};
  group_norm(x, groups, w, b, 1e-5, out, act, stats);
  const std::vector<double> xv = values(x);
  const std::vector<double> wv = w.defined() ? values(w) : std::vector<double>{};
  const std::vector<double> bv = b.defined() ? values(b) : std::vector<double>{};
  Expected e;
  e.value.resize(xv.size());
  e.scale.resize(xv.size());
  std::vector<int64_t> param(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) param[i] = static_cast<int64_t>(i) / hw % c;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<int64_t> members;
      for (int64_t i = 0; i < per_group * hw; ++i)
        members.push_back((s * c + g * per_group) * hw + i);
      normalise_group(xv, members, param, wv, bv, false, 1e-5, act, e);
    }
  compare(out, e, compute_of({&x, &w, &b, &out}), trace);
  compare_stats(stats, e, trace);
}

class NormTest : public IsaTest {};

TEST_P(NormTest, LayerNormAndRmsNormMatchReference) {
  Generator gen(51);
  struct Case {
    Shape shape, normalized;
  };
  const Case cases[] = {{{1}, {1}},      {{3, 7}, {7}},        {{17, 63}, {63}},
                        {{5, 65}, {65}}, {{2, 3, 129}, {129}}, {{4, 9, 17}, {9, 17}},
                        {{63, 1}, {1}},  {{2, 1000}, {1000}}};
  for (const Case& c : cases)
    for (bool rms : {false, true})
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        const Tensor x = Tensor::uniform(c.shape, -2.0, 3.0, gen, t);
        const Tensor w = Tensor::uniform(c.normalized, 0.5, 1.5, gen, t);
        const Tensor b = Tensor::uniform(c.normalized, -1.0, 1.0, gen, t);
        check_layer_norm(rms, x, c.normalized, w, b, t, "affine");
        if (t == DType::BF16) {
          // Half-precision activations with f32 parameters, and without any.
          check_layer_norm(rms, x, c.normalized, w.to(DType::F32), b.to(DType::F32), DType::BF16,
                           "f32 params");
          check_layer_norm(rms, x, c.normalized, Tensor(), Tensor(), DType::F32, "no params");
        }
      }
}

// LayerNorm over the channels of each pixel (PeakNet's levels: 8 or 16 channels, bf16
// activations, f32 parameters), at inference: the narrow-row path for power-of-two lengths up
// to 32 bytes a row and 256 rows or more, blocks and their tails, the generic one otherwise
// (12 channels, few rows), in place too.
TEST_P(NormTest, LayerNormOverAFewChannelsPerPixel) {
  Generator gen(54);
  for (const int64_t len : {2, 4, 8, 12, 16})
    for (const int64_t rows : {100, 256, 300, 4099})
      for (DType t : {DType::F32, DType::BF16, DType::F16}) {
        const Tensor x = Tensor::uniform({rows, len}, -2.0, 3.0, gen, t);
        const Tensor w = Tensor::uniform({len}, 0.5, 1.5, gen);
        const Tensor b = Tensor::uniform({len}, -1.0, 1.0, gen);
        check_layer_norm(false, x, {len}, w, b, t, "pixels", false);
        check_layer_norm(false, x, {len}, Tensor(), Tensor(), t, "pixels, no params", false);
      }
  const Tensor x = Tensor::uniform({1000, 8}, -2.0, 3.0, gen, DType::BF16);
  const Tensor expect = Tensor::empty({1000, 8}, DType::BF16);
  layer_norm(x, {8}, Tensor(), Tensor(), 1e-6, expect);
  layer_norm(x, {8}, Tensor(), Tensor(), 1e-6, x);
  EXPECT_EQ(values(x), values(expect)) << "in place";
}

TEST_P(NormTest, LayerNormStridedInputsAndInPlace) {
  Generator gen(52);
  const Tensor base = Tensor::uniform({65, 33}, -2.0, 2.0, gen, DType::BF16);
  const Tensor w = Tensor::uniform({65}, 0.5, 1.5, gen), b = Tensor::uniform({65}, -1.0, 1.0, gen);
  check_layer_norm(false, base.t(), {65}, w, b, DType::BF16, "transposed");
  check_layer_norm(false, base.slice(1, 0, 33, 2), {17}, Tensor(), Tensor(), DType::F32, "sliced");
  check_layer_norm(true, base.t(), {65}, w, Tensor(), DType::F32, "transposed");
  const Tensor x = Tensor::uniform({9, 65}, -2.0, 2.0, gen);
  const Tensor expect = Tensor::empty({9, 65});
  layer_norm(x, {65}, w, b, 1e-5, expect);
  layer_norm(x, {65}, w, b, 1e-5, x);
  EXPECT_EQ(values(x), values(expect)) << "in place";
  const Tensor out_t = Tensor::empty({65, 33}).t();
  layer_norm(base.t().to(DType::F32), {65}, w, b, 1e-5, out_t);
  const Tensor direct = Tensor::empty({33, 65});
  layer_norm(base.t().to(DType::F32), {65}, w, b, 1e-5, direct);
  EXPECT_EQ(values(out_t), values(direct)) << "strided output";
}

TEST_P(NormTest, LayerNormOfBf16RowOf10000PlusNoiseIsAccurate) {
  // Named hard case: x = 10000 + U(-100, 100) in bf16 (spacing 64 there). E[x^2] - E[x]^2 in
  // f32 subtracts two numbers near 1e8 whose ulp is 8 and loses most of the variance (~3700);
  // the two-pass statistics keep the result within the f64 reference's tolerance.
  Generator gen(53);
  const int64_t len = 4096;
  const Tensor noise = Tensor::uniform({3, len}, -100.0, 100.0, gen, DType::F64);
  const Tensor x = Tensor::empty({3, len}, DType::BF16);
  x.copy_(Tensor::full({3, len}, 10000.0, DType::F64));
  const Tensor shifted = Tensor::empty({3, len}, DType::F64);
  shifted.copy_(noise);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < len; ++i) x.set({r, i}, 10000.0 + shifted.value({r, i}));
  for (DType out_dtype : {DType::F32, DType::BF16}) {
    const Tensor out = Tensor::empty({3, len}, out_dtype);
    layer_norm(x, {len}, Tensor(), Tensor(), 1e-5, out);
    for (double v : values(out)) ASSERT_TRUE(std::isfinite(v));
    check_layer_norm(false, x, {len}, Tensor(), Tensor(), out_dtype, "10000 + noise");
  }
}

TEST_P(NormTest, GroupNormBothLayoutsEveryActivation) {
  Generator gen(54);
  struct Case {
    Shape shape;
    int64_t groups;
  };
  const Case cases[] = {{{2, 8, 5, 7}, 4},   {{1, 6, 3, 3}, 3},   {{3, 17, 2, 2}, 1},
                        {{2, 32, 4, 5}, 32}, {{1, 40, 9, 13}, 8}, {{2, 4, 7}, 2},
                        {{2, 6}, 3}};
  const Activation acts[] = {Activation::None, Activation::SiLU, Activation::GeluTanh,
                             Activation::ReLU, Activation::GeluErf};
  int which = 0;
  for (const Case& c : cases)
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64})
      for (bool channels_last : {false, true}) {
        if (channels_last && c.shape.size() != 4) continue;
        const MemoryFormat format =
            channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
        const Tensor x = Tensor::uniform(c.shape, -2.0, 3.0, gen, t).contiguous(format);
        const Tensor w = Tensor::uniform({c.shape[1]}, 0.5, 1.5, gen, DType::F32);
        const Tensor b = Tensor::uniform({c.shape[1]}, -1.0, 1.0, gen, DType::F32);
        const Activation act = acts[which++ % 5];
        check_group_norm(x, c.groups, w, b, act, t, format,
                         channels_last ? "channels_last" : "nchw");
        check_group_norm(x, c.groups, Tensor(), Tensor(), Activation::SiLU, DType::F32,
                         MemoryFormat::Contiguous,
                         channels_last ? "channels_last, no params, nchw out" : "nchw, no params");
      }
}

TEST_P(NormTest, GroupNormSiluOnVideoUNetShapes) {
  // The fused GroupNorm + SiLU of the U-Net: 32 groups, channels_last, batch of one, large HW
  // (every thread takes a chunk of rows), and NCHW for comparison.
  Generator gen(55);
  const Tensor x = Tensor::uniform({1, 64, 24, 40}, -3.0, 3.0, gen, DType::BF16);
  const Tensor w = Tensor::uniform({64}, 0.5, 1.5, gen), b = Tensor::uniform({64}, -1.0, 1.0, gen);
  check_group_norm(x.contiguous(MemoryFormat::ChannelsLast), 32, w, b, Activation::SiLU,
                   DType::BF16, MemoryFormat::ChannelsLast, "channels_last");
  check_group_norm(x, 32, w, b, Activation::SiLU, DType::BF16, MemoryFormat::Contiguous, "nchw");
  check_group_norm(x.permute({0, 1, 3, 2}), 32, w, b, Activation::SiLU, DType::F32,
                   MemoryFormat::Contiguous, "permuted (copied)");
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(NormTest);

using test_support::error_of;

TEST(Norm, BadArgumentsAreClearErrors) {
  const Tensor x = Tensor::zeros({2, 8});
  EXPECT_EQ(error_of([&] {
              layer_norm(x, {8}, Tensor::ones({7}), Tensor(), 1e-5, Tensor::empty({2, 8}));
            }),
            "[layer_norm] weight has shape [7], expected [8] (the normalized shape)");
  EXPECT_EQ(error_of([&] {
              layer_norm(x, {4}, Tensor(), Tensor(), 1e-5, Tensor::empty({2, 8}));
            }),
            "[layer_norm] normalized_shape [4] does not match the last dims of x [2, 8]");
  EXPECT_EQ(
      error_of([&] {
        rms_norm(x, {8}, Tensor(), 1e-5, Tensor::empty({2, 8}), {Tensor::empty({8}), Tensor()});
      }),
      "[rms_norm] stats.mean has shape [8], expected [2] (x's leading dims)");
  const Tensor img = Tensor::zeros({2, 8, 4, 4});
  EXPECT_EQ(error_of([&] {
              group_norm(img, 3, Tensor(), Tensor(), 1e-5, Tensor::empty({2, 8, 4, 4}));
            }),
            "[group_norm] 3 groups do not divide the 8 channels of x [2, 8, 4, 4]");
  EXPECT_EQ(error_of([&] {
              group_norm(img, 4, Tensor(), Tensor::zeros({4}), 1e-5, Tensor::empty({2, 8, 4, 4}));
            }),
            "[group_norm] bias has shape [4], expected [8] (the channel count)");
  EXPECT_EQ(error_of([&] {
              group_norm(Tensor::zeros({8}), 4, Tensor(), Tensor(), 1e-5, Tensor::empty({8}));
            }),
            "[group_norm] x has shape [8], expected at least 2 dims [N, C, ...]");
  EXPECT_NE(error_of([&] {
              layer_norm(x, {8}, Tensor(), Tensor(), -1.0, Tensor::empty({2, 8}));
            }).find("[layer_norm] eps must be finite and >= 0"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::kernels
