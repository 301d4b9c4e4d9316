// kernels::scaled_dot_product_attention_backward against the gradients of attention computed
// from the definition in f64 on the same (rounded) inputs, per kernel level and dtype, across
// ragged block ends, causal and additive masks, and strided (permuted) layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/kernels/attention.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

struct Case {
  int64_t b, h, sq, sk, d, dv;
  DType dtype;
  bool causal = false;
  bool with_mask = false;
  bool bshd = false;  // q, k, v, dO as permuted views of [B, S, H, D]
};

// dQ, dK, dV of sum(out * dO) in f64, and per element the sum of the magnitudes of the terms
// that make it (what rounding P and dS, and the f32 accumulation, can be off by a part of).
struct Reference {
  std::vector<double> dq, dk, dv, dq_abs, dk_abs, dv_abs;
};

Reference reference(const Case& c, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                    const Tensor& do_in, const Tensor& mask_in, float scale) {
  const Tensor q = q_in.to(DType::F64).contiguous(), k = k_in.to(DType::F64).contiguous(),
               v = v_in.to(DType::F64).contiguous(), dout = do_in.to(DType::F64).contiguous();
  const Tensor mask = mask_in.defined()
                          ? mask_in.expand({c.b, c.h, c.sq, c.sk}).to(DType::F64).contiguous()
                          : Tensor();
  Reference r;
  for (auto* x : {&r.dq, &r.dq_abs}) x->assign(static_cast<std::size_t>(q.numel()), 0.0);
  for (auto* x : {&r.dk, &r.dk_abs}) x->assign(static_cast<std::size_t>(k.numel()), 0.0);
  for (auto* x : {&r.dv, &r.dv_abs}) x->assign(static_cast<std::size_t>(v.numel()), 0.0);
  const double* Q = q.data<double>();
  const double* K = k.data<double>();
  const double* V = v.data<double>();
  const double* dO = dout.data<double>();
  std::vector<double> p(static_cast<std::size_t>(c.sk)), dp(static_cast<std::size_t>(c.sk));
  for (int64_t bh = 0; bh < c.b * c.h; ++bh)
    for (int64_t i = 0; i < c.sq; ++i) {
      const double* qi = Q + (bh * c.sq + i) * c.d;
      const double* doi = dO + (bh * c.sq + i) * c.dv;
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.sk; ++j) {
        double s = 0;
        for (int64_t x = 0; x < c.d; ++x) s += qi[x] * K[(bh * c.sk + j) * c.d + x];
        s *= scale;
        if (mask.defined()) s += mask.data<double>()[(bh * c.sq + i) * c.sk + j];
        if (c.causal && j > i) s = -INFINITY;
        p[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (double& x : p) sum += x = mx == -INFINITY ? 0.0 : std::exp(x - mx);
      double delta = 0;
      for (int64_t j = 0; j < c.sk; ++j) {
        p[j] = sum > 0 ? p[j] / sum : 0.0;
        double g = 0;
        for (int64_t y = 0; y < c.dv; ++y) g += doi[y] * V[(bh * c.sk + j) * c.dv + y];
        dp[j] = g;
        delta += p[j] * g;
      }
      for (int64_t j = 0; j < c.sk; ++j) {
        for (int64_t y = 0; y < c.dv; ++y) {
          const std::size_t at = static_cast<std::size_t>((bh * c.sk + j) * c.dv + y);
          r.dv[at] += p[j] * doi[y];
          r.dv_abs[at] += std::fabs(p[j] * doi[y]);
        }
        const double ds = p[j] * (dp[j] - delta);
        const double ds_abs = p[j] * (std::fabs(dp[j]) + std::fabs(delta));
        for (int64_t x = 0; x < c.d; ++x) {
          const std::size_t qa = static_cast<std::size_t>((bh * c.sq + i) * c.d + x);
          const std::size_t ka = static_cast<std::size_t>((bh * c.sk + j) * c.d + x);
          r.dq[qa] += scale * ds * K[ka];
          r.dq_abs[qa] += scale * ds_abs * std::fabs(K[ka]);
          r.dk[ka] += scale * ds * qi[x];
          r.dk_abs[ka] += scale * ds_abs * std::fabs(qi[x]);
        }
      }
    }
  return r;
}

void expect_close(const char* name, const Tensor& got_in, const std::vector<double>& want,
                  const std::vector<double>& abs_sum, DType dtype, double eps) {
  const Tensor got = got_in.to(DType::F64).contiguous();
  const double half_ulp = test_support::tolerance_for(dtype).rounding;
  int failures = 0;
  for (std::size_t i = 0; i < want.size() && failures < 5; ++i) {
    const double g = got.data<double>()[i];
    const double bound = 2.0 * (half_ulp * std::fabs(want[i]) + eps * abs_sum[i]) + 1e-6;
    if (!(std::fabs(g - want[i]) <= bound)) {
      ++failures;
      ADD_FAILURE() << name << "[" << i << "] = " << g << ", reference " << want[i] << ", bound "
                    << bound;
    }
  }
}

void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE("B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) +
               " Sq=" + std::to_string(c.sq) + " Sk=" + std::to_string(c.sk) +
               " D=" + std::to_string(c.d) + " Dv=" + std::to_string(c.dv) + " " +
               std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : "") +
               (c.with_mask ? " mask" : "") + (c.bshd ? " bshd" : ""));
  Generator gen(seed);
  auto make = [&](int64_t s, int64_t d) {
    if (!c.bshd) return Tensor::randn({c.b, c.h, s, d}, gen, c.dtype);
    return Tensor::randn({c.b, s, c.h, d}, gen, c.dtype).permute({0, 2, 1, 3});
  };
  const Tensor q = make(c.sq, c.d), k = make(c.sk, c.d), v = make(c.sk, c.dv),
               dout = make(c.sq, c.dv);
  AttentionOptions opt;
  opt.causal = c.causal;
  Tensor mask;
  if (c.with_mask) {
    mask = Tensor::randn({1, c.h, c.sq, c.sk}, gen, DType::F32);
    opt.mask = &mask;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const Tensor out = Tensor::empty({c.b, c.h, c.sq, c.dv}, c.dtype);
  const Tensor lse = Tensor::empty({c.b, c.h, c.sq});
  scaled_dot_product_attention(q, k, v, out, opt, &lse);
  const Tensor dq = Tensor::empty(q.shape(), c.dtype), dk = Tensor::empty(k.shape(), c.dtype),
               dv = Tensor::empty(v.shape(), c.dtype);
  scaled_dot_product_attention_backward(q, k, v, out, dout, lse, dq, dk, dv, opt);
  const Reference r = reference(c, q, k, v, dout, mask, scale);
  // bf16: P and dS are rounded to bf16 for the products (2^-9 each) and delta comes from the
  // bf16 out; f16: delta from the f16 out; f32: the f32 sums and the vector exp.
  const double eps = c.dtype == DType::BF16  ? std::ldexp(1.0, -7)
                     : c.dtype == DType::F16 ? std::ldexp(1.0, -10)
                                             : 1e-5;
  expect_close("dq", dq, r.dq, r.dq_abs, c.dtype, eps);
  expect_close("dk", dk, r.dk, r.dk_abs, c.dtype, eps);
  expect_close("dv", dv, r.dv, r.dv_abs, c.dtype, eps);
}

class AttentionBackwardTest : public test_support::IsaTest {};

TEST_P(AttentionBackwardTest, MatchesF64DefinitionAcrossShapesAndDtypes) {
  uint64_t seed = 1;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    check({1, 2, 1, 1, 32, 32, t}, seed++);
    check({2, 1, 17, 65, 64, 64, t}, seed++);
    check({1, 1, 129, 300, 32, 48, t}, seed++);  // several query and key blocks, ragged ends
    check({1, 1, 70, 70, 24, 40, t}, seed++);    // head dims off the AMX multiple of 32
  }
}

TEST_P(AttentionBackwardTest, CausalMaskAndStridedInputs) {
  uint64_t seed = 50;
  for (DType t : {DType::F32, DType::BF16}) {
    check({1, 2, 131, 131, 64, 64, t, true}, seed++);
    check({1, 1, 67, 300, 32, 32, t, true}, seed++);                // Sq < Sk, odd causal block end
    check({1, 1, 257, 257, 64, 64, t, true, false, true}, seed++);  // the GPT's layout, odd T
    check({2, 2, 33, 65, 64, 64, t, false, true}, seed++);
  }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(AttentionBackwardTest);

TEST(AttentionBackward, FullyMaskedRowGetsZeroGradients) {
  Generator gen(3);
  const Tensor q = Tensor::randn({1, 1, 4, 32}, gen), k = Tensor::randn({1, 1, 6, 32}, gen),
               v = Tensor::randn({1, 1, 6, 32}, gen), dout = Tensor::randn({1, 1, 4, 32}, gen);
  Tensor mask = Tensor::zeros({1, 1, 4, 6});
  for (int64_t j = 0; j < 6; ++j) mask.set({0, 0, 2, j}, -INFINITY);  // row 2 sees nothing
  AttentionOptions opt;
  opt.mask = &mask;
  const Tensor out = Tensor::empty({1, 1, 4, 32}), lse = Tensor::empty({1, 1, 4});
  scaled_dot_product_attention(q, k, v, out, opt, &lse);
  const Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()),
               dv = Tensor::empty(v.shape());
  scaled_dot_product_attention_backward(q, k, v, out, dout, lse, dq, dk, dv, opt);
  for (int64_t y = 0; y < 32; ++y) EXPECT_EQ(dq.value({0, 0, 2, y}), 0.0);
  for (int64_t j = 0; j < 6; ++j)
    for (int64_t y = 0; y < 32; ++y) {
      EXPECT_TRUE(std::isfinite(dk.value({0, 0, j, y})));
      EXPECT_TRUE(std::isfinite(dv.value({0, 0, j, y})));
    }
}

}  // namespace
}  // namespace mixprec::kernels
