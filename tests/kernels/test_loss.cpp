#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/loss.h"
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

// Random class indices in [0, c), every `ignore_every`-th row set to ignore_index.
Tensor random_targets(int64_t n, int64_t c, DType dtype, int64_t ignore_every, int64_t ignore_index,
                      Generator& gen) {
  const Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i)
    t.set({i}, ignore_every > 0 && i % ignore_every == 1 ? static_cast<double>(ignore_index)
                                                         : static_cast<double>(gen.next_u32() % c));
  return t;
}

void check_cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o,
                         const std::string& what) {
  const int64_t n = logits.size(0), c = logits.size(1);
  SCOPED_TRACE("cross_entropy " + what + " [" + std::to_string(n) + ", " + std::to_string(c) +
               "] " + std::string(dtype_name(logits.dtype())) + " reduction " +
               std::to_string(int(o.reduction)) + " smoothing " +
               std::to_string(o.label_smoothing));
  const bool f64 = logits.dtype() == DType::F64;
  const DType out_dtype = f64 ? DType::F64 : DType::F32;
  const Tensor out =
      o.reduction == Reduction::None ? Tensor::empty({n}, out_dtype) : Tensor::empty({}, out_dtype);
  cross_entropy(logits, targets, out, o);
  const std::vector<double> x = values(logits), t = values(targets);
  std::vector<double> loss(static_cast<std::size_t>(n)), scale(static_cast<std::size_t>(n));
  double total = 0, total_scale = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto ti = static_cast<int64_t>(t[static_cast<std::size_t>(i)]);
    if (ti == o.ignore_index) continue;
    const double* row = x.data() + i * c;
    double m = -INFINITY, s = 0, sum_x = 0, abs_x = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < c; ++j)
      s += std::exp(row[j] - m), sum_x += row[j], abs_x += std::fabs(row[j]);
    const double lse = m + std::log(s), eps = o.label_smoothing;
    loss[static_cast<std::size_t>(i)] =
        lse - (1 - eps) * row[ti] - eps * sum_x / static_cast<double>(c);
    // f32 rounding of max - x_t, of the sum of exps (relative, so absolute in log) and of the
    // smoothing mean.
    scale[static_cast<std::size_t>(i)] =
        std::fabs(m - row[ti]) + std::fabs(std::log(s)) + 1 + eps * abs_x / static_cast<double>(c);
    total += loss[static_cast<std::size_t>(i)];
    total_scale += scale[static_cast<std::size_t>(i)];
    ++counted;
  }
  const test_support::Tolerance tol = test_support::tolerance_for(out_dtype, out_dtype);
  const int64_t terms = test_support::pairwise_terms(c);
  const std::vector<double> got = values(out);
  if (o.reduction == Reduction::None) {
    for (std::size_t i = 0, failures = 0; i < got.size() && failures < 5; ++i)
      if (!(std::fabs(got[i] - loss[i]) <= tol.bound(loss[i], terms, scale[i])))
        ++failures, ADD_FAILURE() << "loss[" << i << "] = " << got[i] << ", reference " << loss[i];
    return;
  }
  const double want = o.reduction == Reduction::Sum ? total : total / static_cast<double>(counted);
  const double want_scale =
      o.reduction == Reduction::Sum ? total_scale : total_scale / static_cast<double>(counted);
  EXPECT_LE(std::fabs(got[0] - want), tol.bound(want, terms, want_scale))
      << "loss " << got[0] << ", reference " << want;
}

// cross_entropy_backward against dx = w (softmax - goal) in f64: dx is rounded once into the
// logits' dtype, so the bound is its half ulp plus f32's error in the softmax terms.
// dx_dtype: the gradient's dtype (default: the logits'); in_place: dx is a copy of the logits
// that the kernel overwrites.
void check_cross_entropy_grad(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                              const CrossEntropyOptions& o, const std::string& what,
                              std::optional<DType> dx_type = std::nullopt, bool in_place = false) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const DType dx_dtype = dx_type.value_or(logits.dtype());
  SCOPED_TRACE("cross_entropy_backward " + what + " [" + std::to_string(n) + ", " +
               std::to_string(c) + "] " + std::string(dtype_name(logits.dtype())) + " -> " +
               std::string(dtype_name(dx_dtype)) + " reduction " + std::to_string(int(o.reduction)) +
               " smoothing " + std::to_string(o.label_smoothing));
  const std::vector<double> x = values(logits), t = values(targets), g = values(grad);
  Tensor dx = Tensor::full({n, c}, 123.0, dx_dtype);  // every element is written
  if (in_place) {
    dx = logits.contiguous().clone();
    cross_entropy_backward(dx, targets, grad, dx, o);
  } else {
    cross_entropy_backward(logits, targets, grad, dx, o);
  }
  const std::vector<double> got = values(dx);
  int64_t counted = 0;
  for (double ti : t) counted += static_cast<int64_t>(ti) != o.ignore_index;
  const bool f64 = logits.dtype() == DType::F64 || dx_dtype == DType::F64;
  const test_support::Tolerance tol =
      test_support::tolerance_for(dx_dtype, f64 ? DType::F64 : DType::F32);
  int failures = 0;
  for (int64_t i = 0; i < n && failures < 5; ++i) {
    const auto ti = static_cast<int64_t>(t[static_cast<std::size_t>(i)]);
    double w = o.reduction == Reduction::None ? g[static_cast<std::size_t>(i)] : g[0];
    if (o.reduction == Reduction::Mean) w /= static_cast<double>(counted);
    const double* row = x.data() + i * c;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, row[j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(row[j] - m);
    for (int64_t j = 0; j < c; ++j) {
      const double goal = (j == ti ? 1 - o.label_smoothing : 0) + o.label_smoothing / c;
      const double want = ti == o.ignore_index ? 0.0 : w * (std::exp(row[j] - m) / s - goal);
      const double have = got[static_cast<std::size_t>(i * c + j)];
      // The probability's f32 error scales with the exponent's magnitude (x - max rounded).
      const double scale = std::fabs(w) * (1 + std::fabs(row[j] - m)) * std::exp(row[j] - m) / s;
      if (!(std::fabs(have - want) <= tol.bound(want, test_support::pairwise_terms(c), scale) +
                                           std::fabs(w) * 1e-7))
        ++failures, ADD_FAILURE() << "dx[" << i << ", " << j << "] = " << have << ", reference "
                                  << want << " (target " << ti << ")";
    }
  }
}

void check_mse(const Tensor& a, const Tensor& b, Reduction reduction, const std::string& what) {
  SCOPED_TRACE("mse_loss " + what + " " + shape_to_string(a.shape()) + " " +
               std::string(dtype_name(a.dtype())) + " reduction " + std::to_string(int(reduction)));
  const bool f64 = a.dtype() == DType::F64 || b.dtype() == DType::F64;
  const DType out_dtype = f64 ? DType::F64 : DType::F32;
  const Tensor out = reduction == Reduction::None ? Tensor::empty(a.shape(), out_dtype)
                                                  : Tensor::empty({}, out_dtype);
  mse_loss(a, b, out, reduction);
  const std::vector<double> av = values(a), bv = values(b), got = values(out);
  const test_support::Tolerance tol = test_support::tolerance_for(out_dtype, out_dtype);
  double total = 0, total_scale = 0;
  for (std::size_t i = 0; i < av.size(); ++i) {
    const double d = av[i] - bv[i];
    total += d * d;
    total_scale += d * d + 2 * std::fabs(d) * (std::fabs(av[i]) + std::fabs(bv[i]));
    if (reduction == Reduction::None &&
        !(std::fabs(got[i] - d * d) <= tol.bound(d * d, 2, total_scale)))
      ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", reference " << d * d;
  }
  if (reduction == Reduction::None) return;
  const auto n = static_cast<double>(av.size());
  const double want = reduction == Reduction::Sum ? total : total / n;
  const double scale = reduction == Reduction::Sum ? total_scale : total_scale / n;
  EXPECT_LE(std::fabs(got[0] - want),
            tol.bound(want, test_support::pairwise_terms(static_cast<int64_t>(n)), scale))
      << "loss " << got[0] << ", reference " << want;
}

class LossTest : public IsaTest {};

TEST_P(LossTest, CrossEntropyMatchesReference) {
  Generator gen(61);
  for (int64_t n : {1, 17, 63})
    for (int64_t c : {1, 2, 7, 65, 1000})
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        const Tensor logits = Tensor::uniform({n, c}, -6.0, 6.0, gen, t);
        const Tensor targets =
            random_targets(n, c, (n + c) % 2 ? DType::I64 : DType::I32, 5, -100, gen);
        for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
          for (double smoothing : {0.0, 0.1})
            check_cross_entropy(logits, targets, {r, -100, smoothing}, "random");
      }
}

TEST_P(LossTest, CrossEntropyStridedLargeAndIgnored) {
  Generator gen(62);
  const Tensor base = Tensor::uniform({129, 33}, -4.0, 4.0, gen, DType::BF16);
  check_cross_entropy(base.t(), random_targets(33, 129, DType::I64, 0, -100, gen), {},
                      "transposed logits");
  check_cross_entropy(base.slice(1, 0, 33, 2), random_targets(129, 17, DType::I64, 3, 7, gen),
                      {Reduction::Mean, 7, 0.0}, "sliced logits, ignore_index 7");
  const Tensor big = Tensor::uniform({301, 257}, -8.0, 8.0, gen, DType::BF16);
  check_cross_entropy(big, random_targets(301, 257, DType::I64, 0, -100, gen),
                      {Reduction::None, -100, 0.05}, "many rows");
  // Logits far beyond exp's range are fine: only differences from the row max are exponentiated.
  const Tensor huge = Tensor::uniform({9, 65}, 2e4, 3e4, gen, DType::BF16);
  check_cross_entropy(huge, random_targets(9, 65, DType::I64, 0, -100, gen), {}, "logits near 3e4");
  const Tensor all_ignored = Tensor::full({4}, -100, DType::I64);
  const Tensor out = Tensor::empty({});
  cross_entropy(Tensor::zeros({4, 3}), all_ignored, out);
  EXPECT_TRUE(std::isnan(out.item<double>())) << "mean over no rows is 0 / 0";
  cross_entropy(Tensor::zeros({4, 3}), all_ignored, out, {Reduction::Sum});
  EXPECT_EQ(out.item<double>(), 0.0);
}

TEST_P(LossTest, CrossEntropyGradientMatchesReference) {
  Generator gen(64);
  for (int64_t n : {1, 17, 63})
    for (int64_t c : {1, 2, 7, 65, 257})
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        const Tensor logits = Tensor::uniform({n, c}, -6.0, 6.0, gen, t);
        const Tensor targets = random_targets(n, c, DType::I64, 5, -100, gen);
        for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
          for (double smoothing : {0.0, 0.1}) {
            const DType loss_dtype = t == DType::F64 ? DType::F64 : DType::F32;
            const Tensor grad = r == Reduction::None
                                    ? Tensor::uniform({n}, -2.0, 2.0, gen, loss_dtype)
                                    : Tensor::full({}, 1.5, loss_dtype);
            check_cross_entropy_grad(logits, targets, grad, {r, -100, smoothing}, "random");
          }
      }
  // Strided logits, an ignore_index that is a class (with and without smoothing), and logits
  // far from 0.
  const Tensor base = Tensor::uniform({129, 33}, 2e4, 2e4 + 12, gen, DType::F32);
  const Tensor targets = random_targets(33, 129, DType::I64, 3, 7, gen);
  for (double smoothing : {0.0, 0.2})
    check_cross_entropy_grad(base.t(), targets, Tensor::full({}, 1.0),
                             {Reduction::Mean, 7, smoothing}, "transposed");
  // dx wider than the logits (computed in f64), and dx written over the logits themselves.
  const Tensor logits = Tensor::uniform({17, 65}, -6.0, 6.0, gen, DType::BF16);
  const Tensor t17 = random_targets(17, 65, DType::I64, 4, -100, gen);
  check_cross_entropy_grad(logits, t17, Tensor::full({}, 1.0), {}, "f64 dx", DType::F64);
  check_cross_entropy_grad(logits.to(DType::F32), t17, Tensor::full({}, 1.0), {}, "in place",
                           DType::F32, /*in_place=*/true);
}

// Ignored rows get exact zeros, even when their logits are NaN or inf (padding rows of an f16
// batch must not make the gradient non-finite), and a mean over no rows gives zeros too.
TEST(Loss, CrossEntropyGradientOfIgnoredRowsIsZero) {
  const Tensor logits = Tensor::from_vector<float>({NAN, 1, 2, INFINITY, 0, 1}).view({2, 3});
  const Tensor dx = Tensor::full({2, 3}, 5.0);
  cross_entropy_backward(logits, Tensor::from_vector<int64_t>({-100, -100}), Tensor::full({}, 1.0),
                         dx);
  for (double v : values(dx)) EXPECT_EQ(v, 0.0);
  const Tensor finite = Tensor::from_vector<float>({0, 1, 2, 3, 0, 1}).view({2, 3});
  cross_entropy_backward(finite, Tensor::from_vector<int64_t>({-100, 2}), Tensor::full({}, 1.0),
                         dx, {Reduction::Mean, -100, 0.0});
  const std::vector<double> got = values(dx);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(got[static_cast<std::size_t>(j)], 0.0);
  EXPECT_NEAR(got[5], std::exp(1.0) / (std::exp(3.0) + 1 + std::exp(1.0)) - 1, 1e-6);
}

TEST_P(LossTest, MseMatchesReference) {
  Generator gen(63);
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{17, 65}, Shape{3, 129}, Shape{70001}})
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64})
      for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
        const Tensor a = Tensor::uniform(shape, -2.0, 2.0, gen, t),
                     b = Tensor::uniform(shape, -2.0, 2.0, gen, t);
        check_mse(a, b, r, "random");
        if (t == DType::BF16) check_mse(a, b.to(DType::F32), r, "bf16 against f32");
      }
  const Tensor base = Tensor::uniform({65, 33}, -2.0, 2.0, gen, DType::BF16);
  const Tensor target = Tensor::uniform({33, 65}, -2.0, 2.0, gen, DType::F32);
  for (Reduction r : {Reduction::None, Reduction::Mean})
    check_mse(base.t(), target, r, "transposed");
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(LossTest);

using test_support::error_of;

TEST(Loss, BadArgumentsAreClearErrors) {
  const Tensor logits = Tensor::zeros({4, 5});
  const Tensor targets = Tensor::from_vector<int64_t>({0, 4, 7, 1});
  EXPECT_EQ(error_of([&] { cross_entropy(logits, targets, Tensor::empty({})); }),
            "[cross_entropy] target 7 at row 2 is out of range for 5 classes (expected 0 <= target "
            "< 5 or "
            "ignore_index -100)");
  EXPECT_EQ(error_of([&] { cross_entropy(logits, Tensor::zeros({4}), Tensor::empty({})); }),
            "[cross_entropy] targets has dtype f32, expected i64 or i32 class indices");
  EXPECT_EQ(
      error_of([&] {
        cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1}), Tensor::empty({}));
      }),
      "[cross_entropy] targets has shape [2], expected [4] (one class index per row of logits)");
  EXPECT_EQ(
      error_of([&] {
        cross_entropy(logits, Tensor::zeros({4}, DType::I64), Tensor::empty({}, DType::BF16));
      }),
      "[cross_entropy] out has dtype bf16, expected f32 (losses are f32, f64 for f64 inputs)");
  EXPECT_EQ(
      error_of([&] {
        cross_entropy(logits, Tensor::zeros({4}, DType::I64), Tensor::empty({}), {Reduction::None});
      }),
      "[cross_entropy] out has shape [], expected [4] (one loss per element, reduction none)");
  EXPECT_EQ(
      error_of([&] {
        cross_entropy(Tensor::zeros({4, 5, 2}), Tensor::zeros({4}, DType::I64), Tensor::empty({}));
      }),
      "[cross_entropy] logits has shape [4, 5, 2], expected [N, C]");
  const Tensor dx = Tensor::empty({4, 5});
  EXPECT_EQ(error_of([&] {
              cross_entropy_backward(logits, targets, Tensor::full({}, 1.0), dx);
            }),
            "[cross_entropy_backward] target 7 at row 2 is out of range for 5 classes (expected 0 "
            "<= target < 5 or ignore_index -100)");
  const Tensor good = Tensor::zeros({4}, DType::I64);
  EXPECT_EQ(error_of([&] { cross_entropy_backward(logits, good, Tensor::full({4}, 1.0), dx); }),
            "[cross_entropy_backward] grad has shape [4], expected [] (the loss's shape)");
  EXPECT_EQ(error_of([&] {
              cross_entropy_backward(logits, good, Tensor::full({}, 1.0), Tensor::empty({5, 4}).t());
            }),
            "[cross_entropy_backward] dx must be contiguous");
  EXPECT_EQ(error_of([&] {
              mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), Tensor::empty({}));
            }),
            "[mse_loss] b has shape [3, 2], expected [2, 3] (a's shape)");
}

}  // namespace
}  // namespace mixprec::kernels
