// convnext_mlp (kernels/convnext.h) against an f64 reference of the same two passes, at every
// kernel level (the scalar level is the reference the AVX-512 one is held to, through this f64
// one); channel counts 1, 3, 8, 16, 24 (a masked tail and whole vectors), odd pixel counts and
// more than one block of pixels (GRN's sums per block), f32 / bf16 / f16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/convnext.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  return {c.data<double>(), c.data<double>() + c.numel()};
}

double round_to(DType t, double v) {
  return Tensor::scalar(v, DType::F64).to(t).to(DType::F64).item<double>();
}

struct Case {
  int64_t n, h, w, c, ratio;
  DType dtype;
};

ConvNextMlpWeights random_weights(int64_t c, int64_t hd, Generator& gen) {
  // Weights as a trained block has them: f32 norm parameters, the rest in whatever dtype.
  return {Tensor::uniform({c}, 0.5, 1.5, gen),
          Tensor::uniform({c}, -0.3, 0.3, gen),
          1e-6,
          Tensor::uniform({hd, c}, -0.6, 0.6, gen, DType::BF16),
          Tensor::uniform({hd}, -0.2, 0.2, gen),
          Tensor::uniform({hd}, -0.8, 0.8, gen),
          Tensor::uniform({hd}, -0.2, 0.2, gen),
          1e-6,
          Tensor::uniform({c, hd}, -0.5, 0.5, gen),
          Tensor::uniform({c}, -0.2, 0.2, gen)};
}

// The kernel's definition in f64, with the hidden values rounded to the storage dtype where
// the kernel stores them; out[i] and a bound on the error of a correct f32 computation.
struct Reference {
  std::vector<double> out, bound;
};

Reference reference(const Tensor& x, const Tensor& residual, const ConvNextMlpWeights& w) {
  const DType dt = x.dtype();
  const int64_t n = x.size(0), pixels = x.size(1) * x.size(2), c = x.size(3);
  const int64_t hd = w.expand_weight.size(0);
  const auto xv = values(x), rv = values(residual);
  const auto g = values(w.norm_weight), b = values(w.norm_bias);
  const auto we = values(w.expand_weight), be = values(w.expand_bias);
  const auto gamma = values(w.grn_gamma), beta = values(w.grn_beta);
  const auto wp = values(w.project_weight), bp = values(w.project_bias);
  const test_support::Tolerance tol = test_support::tolerance_for(dt);
  const double half_ulp = tol.rounding;
  Reference r{std::vector<double>(xv.size()), std::vector<double>(xv.size())};
  std::vector<double> hidden(static_cast<std::size_t>(pixels * hd));
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> sq(static_cast<std::size_t>(hd), 0.0);
    for (int64_t p = 0; p < pixels; ++p) {
      const double* px = xv.data() + (s * pixels + p) * c;
      double mean = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mean += px[k] / static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) var += (px[k] - mean) * (px[k] - mean) / static_cast<double>(c);
      const double rstd = 1.0 / std::sqrt(var + w.norm_eps);
      for (int64_t j = 0; j < hd; ++j) {
        double a = be[static_cast<std::size_t>(j)];
        for (int64_t k = 0; k < c; ++k)
          a += we[static_cast<std::size_t>(j * c + k)] *
               ((px[k] - mean) * rstd * g[static_cast<std::size_t>(k)] + b[static_cast<std::size_t>(k)]);
        const double v = round_to(dt, 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))));
        hidden[static_cast<std::size_t>(p * hd + j)] = v;
        sq[static_cast<std::size_t>(j)] += v * v;
      }
    }
    std::vector<double> f(static_cast<std::size_t>(hd));
    double mean_norm = 0;
    for (int64_t j = 0; j < hd; ++j) mean_norm += std::sqrt(sq[static_cast<std::size_t>(j)] + 1e-30) / static_cast<double>(hd);
    for (int64_t j = 0; j < hd; ++j)
      f[static_cast<std::size_t>(j)] =
          1.0 + gamma[static_cast<std::size_t>(j)] * std::sqrt(sq[static_cast<std::size_t>(j)] + 1e-30) /
                    (mean_norm + w.grn_eps);
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t k = 0; k < c; ++k) {
        const std::size_t at = static_cast<std::size_t>((s * pixels + p) * c + k);
        double v = bp[static_cast<std::size_t>(k)] + rv[at], terms = std::fabs(rv[at]) + 1.0;
        for (int64_t j = 0; j < hd; ++j) {
          const double t = wp[static_cast<std::size_t>(k * hd + j)] *
                           (hidden[static_cast<std::size_t>(p * hd + j)] * f[static_cast<std::size_t>(j)] +
                            beta[static_cast<std::size_t>(j)]);
          v += t;
          terms += std::fabs(t);
        }
        r.out[at] = v;
        // The final rounding, f32 sums, and each hidden value off by up to an ulp of its dtype
        // (the f32 value before rounding can land on the other side of a rounding boundary)
        // after the LayerNorm, the expand sums and erf in f32 (c + 16 roundings of f32 each).
        r.bound[at] = tol.bound(v, hd + 2, terms) +
                      2.0 * terms * (2.0 * half_ulp + static_cast<double>(c + 16) * std::ldexp(1.0, -24));
      }
  }
  return r;
}

Tensor random_storage(const Shape& shape, DType dt, Generator& gen, double lo, double hi) {
  return Tensor::uniform(shape, lo, hi, gen).to(dt);
}

class ConvNextMlpTest : public IsaTest {};

TEST_P(ConvNextMlpTest, MatchesTheF64Reference) {
  Generator gen(31);
  const std::vector<Case> cases = {
      {1, 5, 7, 1, 2, DType::F32},   {2, 3, 5, 3, 2, DType::BF16},  {1, 9, 11, 8, 2, DType::BF16},
      {2, 17, 19, 8, 2, DType::BF16}, {1, 17, 16, 16, 2, DType::F32}, {2, 6, 7, 16, 3, DType::F16},
      {1, 13, 23, 24, 2, DType::BF16}, {1, 4, 4, 24, 1, DType::F32},  {3, 11, 29, 8, 4, DType::F32}};
  for (const Case& k : cases) {
    SCOPED_TRACE("n " + std::to_string(k.n) + ", " + std::to_string(k.h) + " x " +
                 std::to_string(k.w) + ", C " + std::to_string(k.c) + ", ratio " +
                 std::to_string(k.ratio) + ", " + std::string(dtype_name(k.dtype)));
    const Tensor x = random_storage({k.n, k.h, k.w, k.c}, k.dtype, gen, -2.0, 3.0);
    const Tensor residual = random_storage({k.n, k.h, k.w, k.c}, k.dtype, gen, -1.0, 1.0);
    const ConvNextMlpWeights w = random_weights(k.c, k.ratio * k.c, gen);
    const Tensor out = Tensor::empty(x.shape(), k.dtype);
    convnext_mlp(x, residual, w, out);
    const Reference ref = reference(x, residual, w);
    const auto got = values(out);
    int64_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(got[i] - ref.out[i]) <= ref.bound[i]) && bad++ < 5)
        ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << ref.out[i] << " (bound "
                      << ref.bound[i] << ")";
    EXPECT_EQ(bad, 0);
  }
}

// out may be the residual's buffer (the block's output replacing its input).
TEST_P(ConvNextMlpTest, OutMayAliasTheResidual) {
  Generator gen(5);
  const Tensor x = random_storage({1, 7, 9, 8}, DType::BF16, gen, -2.0, 2.0);
  const Tensor residual = random_storage({1, 7, 9, 8}, DType::BF16, gen, -1.0, 1.0);
  const ConvNextMlpWeights w = random_weights(8, 16, gen);
  const Tensor expected = Tensor::empty(x.shape(), DType::BF16);
  convnext_mlp(x, residual, w, expected);
  const Tensor in_place = residual.clone();
  convnext_mlp(x, in_place, w, in_place);
  EXPECT_EQ(std::memcmp(in_place.data_ptr(), expected.data_ptr(), 7 * 9 * 8 * 2), 0);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvNextMlpTest);

// GRN's statistic is summed per block of pixels, then the blocks in order: any thread count
// gives the same bits.
TEST(ConvNextMlp, TheSameBitsOnOneAndTwoThreads) {
  Generator gen(9);
  const Tensor x = random_storage({2, 40, 33, 16}, DType::BF16, gen, -2.0, 2.0);
  const Tensor residual = random_storage({2, 40, 33, 16}, DType::BF16, gen, -1.0, 1.0);
  const ConvNextMlpWeights w = random_weights(16, 32, gen);
  const int threads = num_threads();
  const Tensor one = Tensor::empty(x.shape(), DType::BF16), two = Tensor::empty(x.shape(), DType::BF16);
  set_num_threads(1);
  convnext_mlp(x, residual, w, one);
  set_num_threads(2);
  convnext_mlp(x, residual, w, two);
  set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.data_ptr(), two.data_ptr(), static_cast<std::size_t>(one.numel()) * 2), 0);
}

TEST(ConvNextMlp, BadInputIsAClearError) {
  Generator gen(3);
  const Tensor x = random_storage({1, 4, 4, 8}, DType::BF16, gen, -1.0, 1.0);
  const ConvNextMlpWeights w = random_weights(8, 16, gen);
  const Tensor out = Tensor::empty(x.shape(), DType::BF16);
  EXPECT_THROW(convnext_mlp(x, x.to(DType::F32), w, out), Error);             // dtypes differ
  EXPECT_THROW(convnext_mlp(x, x, w, Tensor::empty({1, 4, 4, 9}, DType::BF16)), Error);  // shape
  EXPECT_THROW(convnext_mlp(x, x, w, x), Error);                              // out aliases x
  EXPECT_THROW(convnext_mlp(x.permute({0, 2, 1, 3}), x, w, out), Error);      // not contiguous
  ConvNextMlpWeights wrong = w;
  wrong.project_weight = Tensor::zeros({8, 8});
  EXPECT_THROW(convnext_mlp(x, x, wrong, out), Error);                        // project [C, rC]
  EXPECT_THROW(convnext_mlp(x.to(DType::F64), x.to(DType::F64), w,
                            Tensor::empty(x.shape(), DType::F64)),
               Error);  // a storage dtype only
}

}  // namespace
}  // namespace mixprec::kernels
