#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/attention.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

// Plain f64 attention on the same (already rounded) inputs: the reference.
std::vector<double> reference(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                              const AttentionOptions& opt, const Tensor* mask_in) {
  // Dense f64 copies: exact widening of every input dtype.
  const Tensor q = q_in.to(DType::F64).contiguous(), k = k_in.to(DType::F64).contiguous(),
               v = v_in.to(DType::F64).contiguous();
  const Tensor mask = mask_in != nullptr ? mask_in->to(DType::F64).contiguous() : Tensor();
  const double* qd = q.data<double>();
  const double* kd = k.data<double>();
  const double* vd = v.data<double>();
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Sk = k.size(2),
                Dv = v.size(3);
  const double scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> out(static_cast<std::size_t>(B * H * Sq * Dv));
  std::vector<double> score(static_cast<std::size_t>(Sk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < Sk; ++j) {
          double s = 0;
          for (int64_t x = 0; x < D; ++x)
            s += qd[((b * H + h) * Sq + i) * D + x] * kd[((b * H + h) * Sk + j) * D + x];
          s *= scale;
          if (mask.defined()) s += mask.data<double>()[((b * H + h) * Sq + i) * Sk + j];
          if (opt.causal && j > i) s = -INFINITY;
          score[j] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j)
          sum += score[j] = mx == -INFINITY ? 0.0 : std::exp(score[j] - mx);
        for (int64_t y = 0; y < Dv; ++y) {
          double acc = 0;
          for (int64_t j = 0; j < Sk; ++j) acc += score[j] * vd[((b * H + h) * Sk + j) * Dv + y];
          out[static_cast<std::size_t>(((b * H + h) * Sq + i) * Dv + y)] =
              sum > 0 ? acc / sum : 0.0;
        }
      }
  return out;
}

struct Case {
  int64_t b, h, sq, sk, d, dv;
  DType dtype;
  bool causal = false;
  bool with_mask = false;
  bool transposed_layout = false;  // q/k/v as permuted views of [B, S, H, D]
};

void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE("B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) + " Sq=" +
               std::to_string(c.sq) + " Sk=" + std::to_string(c.sk) + " D=" + std::to_string(c.d) +
               " dtype=" + std::string(dtype_name(c.dtype)) + (c.causal ? " causal" : "") +
               (c.with_mask ? " mask" : "") + (c.transposed_layout ? " bshd" : ""));
  Generator gen(seed);
  auto make = [&](int64_t s, int64_t d) {
    if (!c.transposed_layout) return Tensor::randn({c.b, c.h, s, d}, gen, c.dtype);
    return Tensor::randn({c.b, s, c.h, d}, gen, c.dtype).permute({0, 2, 1, 3});
  };
  const Tensor q = make(c.sq, c.d), k = make(c.sk, c.d), v = make(c.sk, c.dv);
  Tensor mask;
  AttentionOptions opt;
  opt.causal = c.causal;
  if (c.with_mask) {
    mask = Tensor::randn({1, c.h, c.sq, c.sk}, gen, DType::F32);
    opt.mask = &mask;
  }
  const Tensor out = Tensor::empty({c.b, c.h, c.sq, c.dv}, c.dtype);
  scaled_dot_product_attention(q, k, v, out, opt);
  const Tensor mask_full = c.with_mask ? mask.expand({c.b, c.h, c.sq, c.sk}) : Tensor();
  const std::vector<double> want = reference(q, k, v, opt, c.with_mask ? &mask_full : nullptr);
  // Probabilities rounded to bf16 (when v is bf16) add a relative error of 2^-9 per term.
  const test_support::Tolerance tol = test_support::tolerance_for(c.dtype);
  const double p_rounding = c.dtype == DType::BF16 ? std::ldexp(1.0, -8) : 0.0;
  const Tensor got = out.to(DType::F64).contiguous();
  int failures = 0;
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.h; ++h)
      for (int64_t i = 0; i < c.sq; ++i)
        for (int64_t y = 0; y < c.dv && failures < 5; ++y) {
          const double w = want[static_cast<std::size_t>(((b * c.h + h) * c.sq + i) * c.dv + y)];
          const double g = got.data<double>()[((b * c.h + h) * c.sq + i) * c.dv + y];
          // Scale of the terms: |v| is O(3) for normals, scores ~ sqrt(D) before scaling.
          const double bound = tol.bound(w, c.sk + c.d, 4.0) + p_rounding * 4.0;
          if (!(std::fabs(g - w) <= bound)) {
            ++failures;
            ADD_FAILURE() << "out[" << b << ", " << h << ", " << i << ", " << y << "] = " << g
                          << ", reference " << w << ", bound " << bound;
          }
        }
}

class AttentionTest : public test_support::IsaTest {};

TEST_P(AttentionTest, MatchesReferenceAcrossShapesAndDtypes) {
  uint64_t seed = 1;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    check({1, 2, 1, 1, 32, 32, t}, seed++);
    check({2, 1, 17, 65, 64, 64, t}, seed++);
    check({1, 1, 129, 300, 32, 48, t}, seed++);  // several query and key blocks, ragged ends
    check({1, 2, 70, 70, 128, 128, t}, seed++);
  }
}

TEST_P(AttentionTest, CausalMaskAndStridedInputs) {
  uint64_t seed = 50;
  for (DType t : {DType::F32, DType::BF16}) {
    check({1, 2, 131, 131, 64, 64, t, true}, seed++);
    check({1, 1, 67, 300, 32, 32, t, true}, seed++);  // Sq < Sk, odd block end
    // The GPT's T: each query block's keys run past its diagonal to a multiple of 32 (AMX's
    // depth for P V); the scores past the diagonal are computed but must never be read.
    check({1, 1, 256, 256, 64, 64, t, true}, seed++);
    check({2, 2, 33, 65, 64, 64, t, false, true}, seed++);
    check({2, 3, 40, 40, 32, 32, t, true, false, true}, seed++);
  }
}

// One or two queries per head (a decoding step) read K and V in place instead of packing them:
// long key ranges, ragged ends, causal, a mask, head dims of 1 to 4 vectors, [B, S, H, D] views.
TEST_P(AttentionTest, FewQueriesReadTheKeysInPlace) {
  uint64_t seed = 90;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    check({2, 3, 1, 300, 64, 64, t}, seed++);
    check({1, 2, 2, 257, 128, 96, t, true}, seed++);
    check({2, 2, 1, 70, 32, 16, t, false, true}, seed++);
    check({1, 2, 2, 40, 64, 64, t, false, false, true}, seed++);
    check({1, 1, 1, 1000, 8, 8, t}, seed++);
  }
}

TEST_P(AttentionTest, FullyMaskedRowGivesZerosNotNaN) {
  for (const int64_t sq : {4, 2}) {  // the blocked path, and the few-query one
    SCOPED_TRACE("Sq=" + std::to_string(sq));
    Generator gen(3);
    const Tensor q = Tensor::randn({1, 1, sq, 32}, gen), k = Tensor::randn({1, 1, 6, 32}, gen),
                 v = Tensor::randn({1, 1, 6, 32}, gen);
    Tensor mask = Tensor::zeros({1, 1, sq, 6});
    const int64_t blind = sq / 2;
    for (int64_t j = 0; j < 6; ++j) mask.set({0, 0, blind, j}, -INFINITY);  // sees nothing
    AttentionOptions opt;
    opt.mask = &mask;
    const Tensor out = Tensor::empty({1, 1, sq, 32});
    const Tensor lse = Tensor::empty({1, 1, sq});
    scaled_dot_product_attention(q, k, v, out, opt, &lse);
    for (int64_t y = 0; y < 32; ++y) EXPECT_EQ(out.value({0, 0, blind, y}), 0.0);
    for (int64_t i = 0; i < sq; ++i)
      if (i != blind) {
        for (int64_t y = 0; y < 32; ++y) EXPECT_TRUE(std::isfinite(out.value({0, 0, i, y})));
      }
    EXPECT_EQ(lse.value({0, 0, blind}), -INFINITY);
    EXPECT_TRUE(std::isfinite(lse.value({0, 0, 0})));
  }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(AttentionTest);

TEST(Attention, Seq4096UsesLessThan64MiBExtra) {
  // Named hard case: O(seq * head_dim) extra memory, not O(seq^2) (which would be 64 MiB of
  // f32 scores for one head alone). Runs at the machine's best kernel level.
  Generator gen(4);
  const Tensor q = Tensor::randn({1, 2, 4096, 64}, gen, DType::BF16);
  const Tensor k = Tensor::randn({1, 2, 4096, 64}, gen, DType::BF16);
  const Tensor v = Tensor::randn({1, 2, 4096, 64}, gen, DType::BF16);
  const Tensor out = Tensor::empty({1, 2, 4096, 64}, DType::BF16);
  CachingAllocator& alloc = CachingAllocator::global();
  alloc.reset_peak();
  const std::size_t before = alloc.stats().allocated_bytes;
  scaled_dot_product_attention(q, k, v, out, {.causal = true});
  const std::size_t extra = alloc.stats().peak_allocated_bytes - before;
  EXPECT_LT(extra, std::size_t{64} << 20);
  // Packed K^T and V per thread (2 x 4096 x 64 x 4 bytes at most) plus block buffers.
  EXPECT_LT(extra, std::size_t{8} << 20);
  for (int64_t i : {0, 100, 4095}) EXPECT_TRUE(std::isfinite(out.value({0, 1, i, 7})));
}

TEST(Attention, ShapeErrorsNameTheOperands) {
  const Tensor q = Tensor::zeros({1, 2, 3, 8}), k = Tensor::zeros({1, 2, 5, 4}),
               v = Tensor::zeros({1, 2, 5, 8});
  const Tensor out = Tensor::empty({1, 2, 3, 8});
  try {
    scaled_dot_product_attention(q, k, v, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[scaled_dot_product_attention] k [1, 2, 5, 4]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mixprec::kernels
