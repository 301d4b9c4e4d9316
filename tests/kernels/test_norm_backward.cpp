// kernels::layer_norm_backward / group_norm_backward against the backward formulas evaluated
// in f64 from the definitions, on every kernel level: NCHW and channels_last, fused SiLU,
// with and without affine parameters, odd sizes, f32 / bf16 / f16 / f64.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/norm.h"
#include "mixprec/kernels/norm_backward.h"
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

// The f64 reference for groups of elements: members[u] are the flat (row-major, logical)
// indices of group u, param[i] the channel of element i (or -1).
struct Reference {
  std::vector<double> dx, dx_scale;  // value and magnitude of its terms, per element
  std::vector<double> dw, db, dw_abs, db_abs;
};

Reference reference(const std::vector<double>& x, const std::vector<double>& g,
                    const std::vector<std::vector<int64_t>>& members,
                    const std::vector<int64_t>& param, const std::vector<double>& w,
                    const std::vector<double>& b, int64_t params, bool rms, double eps, bool silu) {
  Reference r;
  r.dx.assign(x.size(), 0.0);
  r.dx_scale.assign(x.size(), 0.0);
  r.dw.assign(static_cast<std::size_t>(params), 0.0);
  r.db = r.dw_abs = r.db_abs = r.dw;
  for (const auto& mem : members) {
    const auto n = static_cast<double>(mem.size());
    double mean = 0, var = 0;
    for (int64_t i : mem) mean += x[i];
    mean = rms ? 0.0 : mean / n;
    for (int64_t i : mem) var += (x[i] - mean) * (x[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / n + eps);
    double sa = 0, sb = 0, abs_a = 0, abs_b = 0;
    std::vector<double> gp(mem.size()), gy(mem.size()), xh(mem.size());
    for (std::size_t k = 0; k < mem.size(); ++k) {
      const int64_t i = mem[k], c = param[i];
      const double wc = c >= 0 && !w.empty() ? w[c] : 1.0, bc = c >= 0 && !b.empty() ? b[c] : 0.0;
      xh[k] = (x[i] - mean) * rstd;
      gp[k] = g[i];
      if (silu) {
        const double y = xh[k] * wc + bc, s = 1.0 / (1.0 + std::exp(-y));
        gp[k] *= s * (1.0 + y * (1.0 - s));
      }
      gy[k] = gp[k] * wc;
      sa += gy[k];
      sb += gy[k] * xh[k];
      abs_a += std::fabs(gy[k]);
      abs_b += std::fabs(gy[k] * xh[k]);
      if (c >= 0) {
        r.dw[c] += gp[k] * xh[k];
        r.db[c] += gp[k];
        r.dw_abs[c] += std::fabs(gp[k] * xh[k]);
        r.db_abs[c] += std::fabs(gp[k]);
      }
    }
    if (rms) sa = abs_a = 0;
    for (std::size_t k = 0; k < mem.size(); ++k) {
      const int64_t i = mem[k];
      r.dx[i] = rstd * (gy[k] - sa / n - xh[k] * sb / n);
      r.dx_scale[i] = rstd * (std::fabs(gy[k]) + abs_a / n + std::fabs(xh[k]) * abs_b / n + 1e-30);
    }
  }
  return r;
}

void expect_close(const Tensor& got, const std::vector<double>& ref,
                  const std::vector<double>& scale, int64_t terms, DType compute,
                  const std::string& what) {
  const std::vector<double> v = values(got);
  ASSERT_EQ(v.size(), ref.size()) << what;
  const test_support::Tolerance tol = test_support::tolerance_for(got.dtype(), compute);
  int bad = 0;
  for (std::size_t i = 0; i < v.size() && bad < 5; ++i) {
    // The statistics are the forward's f32 values: a few f32 ulps of relative error in rstd
    // and mean scale every term, hence the 8 extra terms.
    const double bound = tol.bound(ref[i], test_support::pairwise_terms(terms) + 8, scale[i]);
    if (!(std::fabs(v[i] - ref[i]) <= bound)) {
      ++bad;
      ADD_FAILURE() << what << " at " << i << ": got " << v[i] << ", want " << ref[i] << " (bound "
                    << bound << ")";
    }
  }
}

class NormBackward : public IsaTest {};

TEST_P(NormBackward, GroupNormMatchesF64EveryLayoutDtypeAndSize) {
  Generator gen(5);
  struct Case {
    int64_t n, c, h, w, groups;
  };
  for (const Case cs : {Case{1, 4, 1, 1, 2}, Case{2, 6, 3, 5, 3}, Case{2, 20, 4, 4, 4},
                        Case{1, 40, 5, 7, 8}, Case{3, 8, 9, 11, 1}, Case{2, 35, 3, 3, 5}})
    for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64})
      for (bool cl : {false, true})
        for (bool silu : {false, true})
          for (bool affine : {true, false}) {
            const Shape shape{cs.n, cs.c, cs.h, cs.w};
            Tensor x = (Tensor::normal(shape, 0.5, 2.0, gen, DType::F64)).to(dt);
            Tensor g = Tensor::uniform(shape, -1.0, 1.0, gen, dt);
            if (cl) {
              x = x.contiguous(MemoryFormat::ChannelsLast);
              g = g.contiguous(MemoryFormat::ChannelsLast);
            }
            const Tensor w = affine ? Tensor::uniform({cs.c}, 0.5, 1.5, gen) : Tensor();
            const Tensor b = affine ? Tensor::uniform({cs.c}, -0.5, 0.5, gen) : Tensor();
            const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
            const NormStats stats{Tensor::empty({cs.n, cs.groups}, st),
                                  Tensor::empty({cs.n, cs.groups}, st)};
            const Activation act = silu ? Activation::SiLU : Activation::None;
            group_norm(x, cs.groups, w, b, 1e-5, Tensor::empty_like(x), act, stats);
            NormGrads out{Tensor::empty_like(x, MemoryFormat::Preserve),
                          affine ? Tensor::empty({cs.c}) : Tensor(),
                          affine ? Tensor::empty({cs.c}) : Tensor()};
            group_norm_backward(x, g, cs.groups, w, b, act, stats, out);
            EXPECT_EQ(out.dx.is_contiguous(MemoryFormat::ChannelsLast) && !out.dx.is_contiguous(),
                      cl && cs.h * cs.w > 1);
            // f64 reference over the logical NCHW order.
            const std::vector<double> xv = values(x), gv = values(g);
            const int64_t hw = cs.h * cs.w, cg = cs.c / cs.groups;
            std::vector<std::vector<int64_t>> members;
            std::vector<int64_t> param(xv.size());
            for (int64_t i = 0; i < static_cast<int64_t>(xv.size()); ++i) param[i] = i / hw % cs.c;
            for (int64_t n = 0; n < cs.n; ++n)
              for (int64_t gr = 0; gr < cs.groups; ++gr) {
                std::vector<int64_t> m;
                for (int64_t i = 0; i < cg * hw; ++i) m.push_back((n * cs.c + gr * cg) * hw + i);
                members.push_back(m);
              }
            const Reference r =
                reference(xv, gv, members, param, affine ? values(w) : std::vector<double>{},
                          affine ? values(b) : std::vector<double>{}, cs.c, false, 1e-5, silu);
            const std::string what = std::string(dtype_name(dt)) +
                                     (cl ? " channels_last" : " nchw") + (silu ? " silu" : "") +
                                     (affine ? " affine" : "") + " c" + std::to_string(cs.c) +
                                     " g" + std::to_string(cs.groups);
            const DType compute = dt == DType::F64 ? DType::F64 : DType::F32;
            expect_close(out.dx, r.dx, r.dx_scale, cg * hw, compute, what + " dx");
            if (affine) {
              expect_close(out.dweight, r.dw, r.dw_abs, cs.n * hw, compute, what + " dweight");
              expect_close(out.dbias, r.db, r.db_abs, cs.n * hw, compute, what + " dbias");
            }
          }
}

TEST_P(NormBackward, LayerAndRmsNormMatchF64) {
  Generator gen(9);
  // 2500: a row longer than one leaf of the blocked sums (1024 lanes at 16 a vector), whose
  // sums of g' and g' xhat are taken in one walk of the row.
  for (int64_t rows : {1, 3, 17, 40})
    for (int64_t len : {1, 7, 33, 100, 2500})
      for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64})
        for (bool rms : {false, true})
          for (bool affine : {true, false}) {
            const Tensor x = Tensor::normal({rows, len}, 1.0, 3.0, gen, DType::F64).to(dt);
            const Tensor g = Tensor::uniform({rows, len}, -1.0, 1.0, gen, dt);
            const Tensor w = affine ? Tensor::uniform({len}, 0.5, 1.5, gen, DType::BF16) : Tensor();
            const Tensor b = affine && !rms ? Tensor::uniform({len}, -0.5, 0.5, gen) : Tensor();
            const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
            const NormStats stats{Tensor::empty({rows}, st), Tensor::empty({rows}, st)};
            if (rms)
              rms_norm(x, {len}, w, 1e-5, Tensor::empty_like(x), stats);
            else
              layer_norm(x, {len}, w, b, 1e-5, Tensor::empty_like(x), stats);
            NormGrads out{Tensor::empty_like(x),
                          affine ? Tensor::empty({len}, DType::BF16) : Tensor(), Tensor()};
            layer_norm_backward(x, g, {len}, w, rms, stats, out);
            const std::vector<double> xv = values(x), gv = values(g);
            std::vector<std::vector<int64_t>> members;
            std::vector<int64_t> param(xv.size());
            for (int64_t i = 0; i < rows * len; ++i) param[i] = i % len;
            for (int64_t r = 0; r < rows; ++r) {
              std::vector<int64_t> m;
              for (int64_t j = 0; j < len; ++j) m.push_back(r * len + j);
              members.push_back(m);
            }
            const Reference r =
                reference(xv, gv, members, param, affine ? values(w) : std::vector<double>{}, {},
                          len, rms, 1e-5, false);
            const std::string what = std::string(dtype_name(dt)) + (rms ? " rms" : " layer") +
                                     " rows " + std::to_string(rows) + " len " +
                                     std::to_string(len);
            const DType compute = dt == DType::F64 ? DType::F64 : DType::F32;
            expect_close(out.dx, r.dx, r.dx_scale, len, compute, what + " dx");
            if (affine) expect_close(out.dweight, r.dw, r.dw_abs, rows, compute, what + " dweight");
          }
}

TEST_P(NormBackward, LargeChannelsLastGroupAgreesWithNchw) {
  // The two GroupNorm paths sum in different orders; on a video-model shape both stay within
  // the tolerance of each other.
  Generator gen(21);
  const Shape shape{2, 64, 32, 32};
  const Tensor x = Tensor::normal(shape, 0.0, 1.0, gen, DType::BF16);
  const Tensor g = Tensor::normal(shape, 0.0, 1e-3, gen, DType::BF16);
  const Tensor w = Tensor::uniform({64}, 0.5, 1.5, gen), b = Tensor::uniform({64}, -0.5, 0.5, gen);
  NormGrads a{Tensor::empty_like(x), Tensor::empty({64}), Tensor::empty({64})};
  NormGrads c{Tensor::empty(shape, DType::BF16, MemoryFormat::ChannelsLast), Tensor::empty({64}),
              Tensor::empty({64})};
  for (int pass = 0; pass < 2; ++pass) {
    const Tensor xs = pass == 0 ? x : x.contiguous(MemoryFormat::ChannelsLast);
    const NormStats stats{Tensor::empty({2, 32}), Tensor::empty({2, 32})};
    group_norm(xs, 32, w, b, 1e-5, Tensor::empty_like(xs), Activation::SiLU, stats);
    group_norm_backward(xs, pass == 0 ? g : g.contiguous(MemoryFormat::ChannelsLast), 32, w, b,
                        Activation::SiLU, stats, pass == 0 ? a : c);
  }
  const std::vector<double> da = values(a.dx), dc = values(c.dx), wa = values(a.dweight),
                            wc = values(c.dweight);
  double scale = 0;
  for (double v : da) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < da.size(); ++i)
    ASSERT_NEAR(da[i], dc[i], 2 * std::ldexp(std::fabs(da[i]), -8) + 1e-5 * scale) << i;
  for (std::size_t i = 0; i < wa.size(); ++i)
    ASSERT_NEAR(wa[i], wc[i], 1e-4 * (1 + std::fabs(wa[i])));
}

TEST_P(NormBackward, RejectsMissingStatistics) {
  const Tensor x = Tensor::zeros({2, 4, 3, 3});
  NormGrads out{Tensor::empty_like(x), Tensor(), Tensor()};
  EXPECT_THROW(group_norm_backward(x, x, 2, Tensor(), Tensor(), Activation::None, {}, out), Error);
  EXPECT_THROW(layer_norm_backward(x, x, {3, 3}, Tensor(), false, {}, out), Error);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(NormBackward);

}  // namespace
}  // namespace mixprec::kernels
