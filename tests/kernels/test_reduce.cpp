#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/reduce.h"
#include "support/error_of.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

enum class Op { Sum, Mean, Max, Min, Var, VarBiased };
constexpr Op kOps[] = {Op::Sum, Op::Mean, Op::Max, Op::Min, Op::Var, Op::VarBiased};

const char* op_name(Op op) {
  const char* names[] = {"sum", "mean", "max", "min", "var", "var(biased)"};
  return names[static_cast<int>(op)];
}

void run(Op op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
         const Tensor& out) {
  switch (op) {
    case Op::Sum:
      return sum(x, dims, keepdim, out);
    case Op::Mean:
      return mean(x, dims, keepdim, out);
    case Op::Max:
      return max(x, dims, keepdim, out);
    case Op::Min:
      return min(x, dims, keepdim, out);
    case Op::Var:
      return var(x, dims, true, keepdim, out);
    case Op::VarBiased:
      return var(x, dims, false, keepdim, out);
  }
}

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::F64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// The f64 reference: the elements of each output position, gathered by walking x row-major,
// then reduced plainly. scale is the magnitude the kernel's f32 arithmetic works at.
struct Reference {
  std::vector<double> value, scale;
  int64_t len = 0;
};

Reference reference(Op op, const Tensor& x, std::vector<int64_t> dims) {
  const Shape& shape = x.shape();
  const auto ndim = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (int64_t d : dims) reduced[static_cast<std::size_t>(d < 0 ? d + ndim : d)] = true;
  int64_t groups = 1;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (!reduced[d]) groups *= shape[d];
  std::vector<std::vector<double>> members(static_cast<std::size_t>(groups));
  const std::vector<double> xv = values(x);
  std::vector<int64_t> index(shape.size(), 0);
  for (double v : xv) {
    int64_t g = 0;
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (!reduced[d]) g = g * shape[d] + index[d];
    members[static_cast<std::size_t>(g)].push_back(v);
    for (auto d = ndim - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < shape[static_cast<std::size_t>(d)]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  Reference r;
  r.len = groups == 0 ? 0 : static_cast<int64_t>(members[0].size());
  for (const auto& m : members) {
    const auto n = static_cast<double>(m.size());
    double s = 0, abs_s = 0, best = op == Op::Max ? -INFINITY : INFINITY;
    for (double v : m) {
      s += v;
      abs_s += std::fabs(v);
      best = op == Op::Max ? std::max(best, v) : std::min(best, v);
    }
    const double mu = s / n;
    double ss = 0, spread = 0;
    for (double v : m) {
      ss += (v - mu) * (v - mu);
      spread += 2 * std::fabs(v - mu) * (std::fabs(v) + std::fabs(mu));
    }
    const double divisor = op == Op::Var ? n - 1 : n;
    switch (op) {
      case Op::Sum:
        r.value.push_back(s), r.scale.push_back(abs_s);
        break;
      case Op::Mean:
        r.value.push_back(mu), r.scale.push_back(abs_s / n);
        break;
      case Op::Max:
      case Op::Min:
        r.value.push_back(best), r.scale.push_back(0);
        break;
      case Op::Var:
      case Op::VarBiased:
        r.value.push_back(ss / divisor), r.scale.push_back((ss + spread) / divisor);
        break;
    }
  }
  return r;
}

void check(Op op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype,
           const std::string& what) {
  const std::string trace = std::string(op_name(op)) + " of " + what + " " +
                            shape_to_string(x.shape()) + " " + std::string(dtype_name(x.dtype())) +
                            " over " + shape_to_string(dims) + (keepdim ? " keepdim" : "") +
                            " -> " + std::string(dtype_name(out_dtype));
  SCOPED_TRACE(trace);
  const Tensor out =
      Tensor::full(reduced_shape(x.shape(), dims, keepdim, "test"), 123.0, out_dtype);
  run(op, x, dims, keepdim, out);
  const Reference ref = reference(op, x, dims);
  const std::vector<double> got = values(out);
  ASSERT_EQ(got.size(), ref.value.size());
  const DType compute =
      x.dtype() == DType::F64 || out_dtype == DType::F64 ? DType::F64 : DType::F32;
  const test_support::Tolerance tol = test_support::tolerance_for(out_dtype, compute);
  for (std::size_t i = 0, failures = 0; i < got.size() && failures < 5; ++i) {
    if (std::isnan(ref.value[i])) {  // var of one element, unbiased: 0 / 0
      if (!std::isnan(got[i]))
        ++failures, ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", expected NaN";
      continue;
    }
    const double bound =
        tol.bound(ref.value[i], test_support::pairwise_terms(ref.len), ref.scale[i]);
    if (!(std::fabs(got[i] - ref.value[i]) <= bound))
      ++failures, ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", reference " << ref.value[i]
                                << ", |diff| " << std::fabs(got[i] - ref.value[i]) << " > bound "
                                << bound;
  }
}

class ReduceTest : public IsaTest {};

TEST_P(ReduceTest, EveryOpDimsAndDtypeMatchesReference) {
  Generator gen(31);
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const Case cases[] = {
      {{1}, {0}},
      {{7}, {}},
      {{129}, {-1}},
      {{17, 63}, {1}},
      {{17, 63}, {0}},
      {{65, 7}, {0, 1}},
      {{3, 17, 65}, {1}},
      {{3, 17, 65}, {0, 2}},
      {{3, 1, 7}, {1}},
      {{5, 3, 129}, {2, 1}},
      {{2, 3, 4, 5}, {1, 3}},
      {{63, 1, 17}, {0}},
      {{4, 33, 1}, {-2, -1}},
  };
  for (const Case& c : cases)
    for (Op op : kOps)
      for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
        const Tensor x = Tensor::uniform(c.shape, -2.0, 3.0, gen, t);
        const bool keepdim = (c.shape.size() + static_cast<std::size_t>(op)) % 2 == 0;
        check(op, x, c.dims, keepdim, t, "random");
        if (t != DType::F32) check(op, x, c.dims, !keepdim, DType::F32, "random, f32 out");
      }
}

TEST_P(ReduceTest, StridedInputsAndOutputs) {
  Generator gen(32);
  const Tensor base = Tensor::uniform({65, 33}, -1.0, 1.0, gen, DType::BF16);
  for (Op op : kOps) {
    check(op, base.t(), {1}, false, DType::F32, "transposed");
    check(op, base.t(), {0}, true, DType::BF16, "transposed");
    check(op, base.slice(0, 1, 65, 4).slice(1, 0, 33, 2), {0}, false, DType::F32, "sliced");
    check(op, base.slice(0, 0, 1).expand({17, 33}), {0}, false, DType::F32, "expanded");
    const Tensor cl = Tensor::uniform({2, 17, 3, 5}, -1.0, 1.0, gen, DType::F32)
                          .contiguous(MemoryFormat::ChannelsLast);
    check(op, cl, {2, 3}, true, DType::F32, "channels_last spatial");
    check(op, cl, {0, 2, 3}, false, DType::F32, "channels_last per channel");
  }
  const Tensor x = Tensor::uniform({17, 9}, -1.0, 1.0, gen);
  const Tensor out = Tensor::zeros({9, 2}).select(1, 1);  // out with stride 2
  sum(x, {0}, false, out);
  const Tensor expect = Tensor::empty({9});
  sum(x, {0}, false, expect);
  EXPECT_EQ(values(out), values(expect));
}

TEST_P(ReduceTest, LargeRowsAndColumnsUseEveryThread) {
  Generator gen(33);
  for (Op op : kOps) {
    check(op, Tensor::uniform({70001}, -1.0, 2.0, gen, DType::BF16), {}, false, DType::F32,
          "one long line");
    check(op, Tensor::uniform({301, 257}, -1.0, 2.0, gen, DType::F32), {1}, false, DType::F32,
          "many rows");
    check(op, Tensor::uniform({3001, 37}, -1.0, 2.0, gen, DType::F16), {0}, false, DType::F32,
          "long columns");
  }
}

TEST_P(ReduceTest, SumOf100000Bf16OnesIsExact) {
  // Named hard case: a bf16 accumulator stalls at 256; f32 accumulation is exact here.
  const Tensor ones = Tensor::ones({100000}, DType::BF16);
  const Tensor out = Tensor::empty({}, DType::F32);
  sum(ones, {}, false, out);
  EXPECT_EQ(out.item<float>(), 100000.0f);
  const Tensor out16 = Tensor::empty({}, DType::BF16);
  sum(ones, {}, false, out16);
  EXPECT_EQ(out16.item<float>(), float(BFloat16(100000.0f))) << "rounded once, on the final write";
  const Tensor columns = Tensor::ones({100000, 3}, DType::BF16);
  const Tensor col_out = Tensor::empty({3}, DType::F32);
  sum(columns, {0}, false, col_out);
  EXPECT_EQ(values(col_out), (std::vector<double>{100000, 100000, 100000}));
  mean(columns, {0}, false, col_out);
  EXPECT_EQ(values(col_out), (std::vector<double>{1, 1, 1}));
}

TEST_P(ReduceTest, LongSumStaysAccurate) {
  // 2^20 copies of 0.1f: a sequential f32 sum drifts by ~1e-4 relative; pairwise stays near
  // one rounding per tree level.
  const int64_t n = int64_t{1} << 20;
  const Tensor x = Tensor::full({n}, 0.1, DType::F32);
  const Tensor out = Tensor::empty({});
  sum(x, {}, false, out);
  const double exact = static_cast<double>(n) * static_cast<double>(0.1f);
  EXPECT_NEAR(out.item<double>(), exact, exact * 2e-6);
  const Tensor rows = Tensor::empty({1});
  sum(x.view({1, n}), {1}, false, rows);  // the same line, not split over threads
  EXPECT_NEAR(rows.item<double>(), exact, exact * 2e-6);
  const Tensor columns = Tensor::empty({4});
  sum(x.view({n / 4, 4}), {0}, false, columns);  // four long columns, one lane each
  for (double v : values(columns)) EXPECT_NEAR(v, exact / 4, exact / 4 * 2e-6);
}

TEST_P(ReduceTest, VarianceOfLargeMeanIsTwoPass) {
  // E[x^2] - E[x]^2 in f32 loses the variance of 10000 + U(-1, 1) entirely.
  Generator gen(34);
  const Tensor noise = Tensor::uniform({4099}, -1.0, 1.0, gen, DType::F32);
  const Tensor x = Tensor::empty({4099});
  x.copy_(noise);
  const std::vector<double> nv = values(noise);
  for (int64_t i = 0; i < 4099; ++i) x.set({i}, 10000.0 + nv[static_cast<std::size_t>(i)]);
  check(Op::Var, x, {}, false, DType::F32, "10000 + noise");
  const Tensor out = Tensor::empty({});
  var(x, {}, false, false, out);
  EXPECT_NEAR(out.item<double>(), 1.0 / 3.0, 0.03);
}

TEST_P(ReduceTest, NaNPropagatesAndEmptyReductions) {
  const Tensor x = Tensor::from_vector<float>({1.0f, NAN, 3.0f, -4.0f, 2.0f, 0.5f}, {2, 3});
  for (Op op : {Op::Max, Op::Min, Op::Sum}) {
    const Tensor out = Tensor::empty({2});
    run(op, x, {1}, false, out);
    const std::vector<double> v = values(out);
    EXPECT_TRUE(std::isnan(v[0])) << op_name(op);
    EXPECT_EQ(v[1], op == Op::Max ? 2.0 : op == Op::Min ? -4.0 : -1.5) << op_name(op);
  }
  const Tensor empty = Tensor::empty({0, 3});
  const Tensor out = Tensor::full({3}, 7.0);
  sum(empty, {0}, false, out);
  EXPECT_EQ(values(out), (std::vector<double>{0, 0, 0}));
  mean(empty, {0}, false, out);
  EXPECT_TRUE(std::isnan(values(out)[0]));
  var(Tensor::ones({4, 1}), {1}, true, false,
      Tensor::empty({4}));  // n = 1, unbiased: NaN, no crash
  const Tensor one = Tensor::empty({4});
  var(Tensor::ones({4, 1}), {1}, true, false, one);
  EXPECT_TRUE(std::isnan(values(one)[0]));
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ReduceTest);

using test_support::error_of;

TEST(Reduce, BadArgumentsAreClearErrors) {
  const Tensor x = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(error_of([&] {
              sum(x, {1}, false, Tensor::empty({2, 3}));
            }),
            "[sum] out has shape [2, 3], expected [2, 4] (x [2, 3, 4] reduced over dims [1])");
  EXPECT_EQ(error_of([&] {
              mean(x, {0, -1}, true, Tensor::empty({2, 3, 1}));
            }),
            "[mean] out has shape [2, 3, 1], expected [1, 3, 1] (x [2, 3, 4] reduced over dims [0, "
            "-1] with keepdim)");
  EXPECT_EQ(error_of([&] {
              var(x, {2, -1}, true, false, Tensor::empty({2, 3}));
            }),
            "[var] dim -1 appears twice in dims [2, -1]");
  EXPECT_NE(error_of([&] {
              sum(x, {3}, false, Tensor::empty({2, 3}));
            }).find("[sum]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              max(Tensor::zeros({0, 3}), {0}, false, Tensor::empty({3}));
            }).find("[max] cannot reduce over dim 0 of x [0, 3]: it has no elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              sum(Tensor::zeros({3}, DType::I32), {}, false, Tensor::empty({}));
            }).find("[sum] x has dtype i32, expected a floating dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::kernels
