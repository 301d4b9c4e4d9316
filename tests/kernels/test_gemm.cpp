#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec::kernels {
namespace {

using test_support::IsaTest;

// A matrix of any dtype, filled with uniform values in [-1, 1) rounded to its dtype.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;
  Buffer(DType t, int64_t count, std::mt19937& rng)
      : dtype(t), bytes(static_cast<std::size_t>(count) * dtype_size(t)) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(static_cast<std::size_t>(count));
    for (float& v : values) v = dist(rng);
    convert(values.data(), DType::F32, bytes.data(), t, values.size());
  }
  void* data() { return bytes.data(); }
  std::vector<double> widened() const {
    std::vector<double> out(bytes.size() / dtype_size(dtype));
    convert(bytes.data(), dtype, out.data(), DType::F64, out.size());
    return out;
  }
};

struct Case {
  int64_t m, n, k;
  DType a, b, c;
  bool trans_a = false, trans_b = false;
  GemmEpilogue ep{};
  bool with_bias = false, with_residual = false;
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " A=" + std::string(dtype_name(c.a)) + (c.trans_a ? "^T" : "") +
         " B=" + std::string(dtype_name(c.b)) + (c.trans_b ? "^T" : "") +
         " C=" + std::string(dtype_name(c.c)) +
         " act=" + std::to_string(static_cast<int>(c.ep.activation)) +
         " alpha=" + std::to_string(c.ep.alpha) + " beta=" + std::to_string(c.ep.beta) +
         (c.with_bias ? " bias" : "") + (c.with_residual ? " residual" : "");
}

// Runs one case through gemm() and gemm_reference() and compares element by element against
// the tolerance table, with the reduction's own sum |a||b| as the scale.
void check_case(Case cs, uint32_t seed) {
  SCOPED_TRACE(describe(cs));
  std::mt19937 rng(seed);
  Buffer a(cs.a, cs.m * cs.k, rng), b(cs.b, cs.k * cs.n, rng);
  Buffer c(cs.c, cs.m * cs.n, rng);
  Buffer bias(DType::BF16, cs.n, rng), residual(DType::F32, cs.m * cs.n, rng);
  Buffer expect = c;
  MatrixView av = cs.trans_a ? MatrixView::row_major(a.data(), cs.a, cs.k, cs.m, cs.m).transposed()
                             : MatrixView::row_major(a.data(), cs.a, cs.m, cs.k, cs.k);
  MatrixView bv = cs.trans_b ? MatrixView::row_major(b.data(), cs.b, cs.n, cs.k, cs.k).transposed()
                             : MatrixView::row_major(b.data(), cs.b, cs.k, cs.n, cs.n);
  GemmEpilogue ep = cs.ep;
  if (cs.with_bias) {
    ep.bias = bias.data();
    ep.bias_dtype = bias.dtype;
  }
  if (cs.with_residual) {
    ep.residual = residual.data();
    ep.residual_dtype = residual.dtype;
    ep.residual_ld = cs.n;
  }
  gemm(av, bv, MutableMatrixView::row_major(c.data(), cs.c, cs.m, cs.n, cs.n), ep);
  gemm_reference(av, bv, MutableMatrixView::row_major(expect.data(), cs.c, cs.m, cs.n, cs.n), ep);

  const test_support::Tolerance tol = test_support::tolerance_for(cs.c);
  const std::vector<double> a64 = a.widened(), b64 = b.widened();
  const std::vector<double> got64 = c.widened(), want64 = expect.widened();
  int failures = 0;
  for (int64_t i = 0; i < cs.m && failures < 5; ++i) {
    for (int64_t j = 0; j < cs.n && failures < 5; ++j) {
      double abs_sum = 0.0;
      for (int64_t p = 0; p < cs.k; ++p) {
        const double x = a64[cs.trans_a ? p * cs.m + i : i * cs.k + p];
        const double y = b64[cs.trans_b ? j * cs.k + p : p * cs.n + j];
        abs_sum += std::fabs(x * y);
      }
      abs_sum = std::fabs(ep.alpha) * abs_sum + 3.0;  // + beta C, bias, residual: each <= 1
      const double want = want64[i * cs.n + j], got = got64[i * cs.n + j];
      const double bound = tol.bound(want, cs.k, abs_sum);
      if (!(std::fabs(got - want) <= bound)) {
        ++failures;
        ADD_FAILURE() << "C[" << i << ", " << j << "] = " << got << ", reference " << want
                      << ", |diff| " << std::fabs(got - want) << " > bound " << bound;
      }
    }
  }
}

class GemmTest : public IsaTest {};

TEST_P(GemmTest, OddShapesAllDtypesMatchReference) {
  const DType floats[] = {DType::F32, DType::BF16, DType::F16};
  const int64_t sizes[] = {1, 7, 17, 63, 65, 129};
  uint32_t seed = 1;
  for (DType a : floats)
    for (DType b : floats)
      for (int64_t m : sizes)
        for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{65}})
          for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{129}}) {
            const DType c = (m + n + k) % 3 == 0 ? DType::F32 : (m % 2 ? DType::BF16 : DType::F16);
            check_case({m, n, k, a, b, c}, seed++);
          }
}

TEST_P(GemmTest, TransposedOperandsMatchReference) {
  uint32_t seed = 100;
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) check_case({63, 65, 129, t, t, DType::F32, ta, tb}, seed++);
  // B^T packs 16 columns x 16 k-pairs per register transpose: short, odd and partial K and N.
  for (int64_t k : {1, 2, 7, 31, 33, 64})
    for (int64_t n : {1, 16, 17, 33}) check_case({5, n, k, DType::BF16, DType::BF16, DType::F32, false, true}, seed++);
}

// A given transposed (stored [K, M], as a linear layer's dY for dW) packs into the same panels
// as a row-major copy of it: the products are the same bits. Partial panels (M not a multiple
// of 14) and odd, short and long K.
TEST_P(GemmTest, TransposedAPacksAsARowMajorCopy) {
  if (isa() >= IsaLevel::Amx)
    GTEST_SKIP() << "AMX tiles read a row-major bf16 A in place: another kernel, not a packing";
  std::mt19937 rng(17);
  for (DType t : {DType::BF16, DType::F32})
    for (int64_t m : {1, 13, 14, 15, 29, 63})
      for (int64_t k : {1, 2, 7, 31, 33, 64, 129}) {
        const int64_t n = 37;
        Buffer stored(t, k * m, rng), b(t, k * n, rng);  // stored: A^T, [K, M]
        Buffer a(t, m * k, rng);                         // A = stored^T, row-major
        const std::size_t es = dtype_size(t);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < k; ++j)
            std::memcpy(a.bytes.data() + static_cast<std::size_t>(i * k + j) * es,
                        stored.bytes.data() + static_cast<std::size_t>(j * m + i) * es, es);
        std::vector<float> from_transposed(static_cast<std::size_t>(m * n)),
            from_copy(from_transposed.size());
        const MatrixView bv = MatrixView::row_major(b.data(), t, k, n, n);
        gemm(MatrixView::row_major(stored.data(), t, k, m, m).transposed(), bv,
             MutableMatrixView::row_major(from_transposed.data(), DType::F32, m, n, n));
        gemm(MatrixView::row_major(a.data(), t, m, k, k), bv,
             MutableMatrixView::row_major(from_copy.data(), DType::F32, m, n, n));
        EXPECT_EQ(0, std::memcmp(from_transposed.data(), from_copy.data(),
                                 from_copy.size() * sizeof(float)))
            << dtype_name(t) << " m " << m << " k " << k;
      }
}

TEST_P(GemmTest, FusedEpilogueMatchesReference) {
  uint32_t seed = 200;
  for (Activation act : {Activation::None, Activation::ReLU, Activation::GeluTanh,
                         Activation::GeluErf, Activation::SiLU})
    for (DType t : {DType::F32, DType::BF16}) {
      Case cs{33, 47, 70, t, t, t};
      cs.ep.activation = act;
      cs.ep.alpha = 0.5f;
      cs.ep.beta = act == Activation::None ? 0.25f : 0.0f;
      cs.with_bias = true;
      cs.with_residual = act != Activation::ReLU;
      check_case(cs, seed++);
    }
}

TEST_P(GemmTest, MixedF32ActivationsTimesBf16Weights) {
  check_case({31, 70, 96, DType::F32, DType::BF16, DType::F32, false, true}, 300);
  check_case({31, 70, 96, DType::BF16, DType::F32, DType::BF16}, 301);
}

TEST_P(GemmTest, LargeEnoughToUseEveryThreadAndSlab) {
  // N spans several packed slabs (K large) and M several row groups on both threads.
  check_case({130, 300, 2100, DType::BF16, DType::BF16, DType::F32, false, true}, 400);
  check_case({130, 300, 700, DType::F32, DType::F32, DType::F32}, 401);
}

TEST_P(GemmTest, Bf16OnesSumExactlyIn32Bits) {
  // Named hard case: a bf16 accumulator would stall at 256; f32 accumulation gives 100000.
  const int64_t k = 100000;
  std::vector<uint16_t> ones(static_cast<std::size_t>(k), BFloat16(1.0f).bits);
  float out = 0.0f;
  gemm(MatrixView::row_major(ones.data(), DType::BF16, 1, k, k),
       MatrixView::row_major(ones.data(), DType::BF16, k, 1, 1),
       MutableMatrixView::row_major(&out, DType::F32, 1, 1, 1));
  EXPECT_EQ(out, 100000.0f);
}

TEST_P(GemmTest, EmptyKGivesEpilogueOfZero) {
  std::vector<float> c(6, 9.0f), bias{1.0f, 2.0f, 3.0f};
  GemmEpilogue ep;
  ep.bias = bias.data();
  gemm(MatrixView::row_major(nullptr, DType::F32, 2, 0, 0),
       MatrixView::row_major(nullptr, DType::F32, 0, 3, 3),
       MutableMatrixView::row_major(c.data(), DType::F32, 2, 3, 3), ep);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 1, 2, 3}));
}

TEST_P(GemmTest, PrepackedWeightsMatchUnpacked) {
  std::mt19937 rng(7);
  // Same dtypes, and mixed both ways (the micro-kernel follows A's and B's own dtypes).
  for (const auto& [t, tw] :
       {std::pair{DType::F32, DType::F32}, std::pair{DType::BF16, DType::BF16},
        std::pair{DType::F16, DType::F16}, std::pair{DType::BF16, DType::F32},
        std::pair{DType::F32, DType::BF16}}) {
    Buffer x(t, 37 * 80, rng), w(tw, 90 * 80, rng);
    std::vector<float> direct(37 * 90), packed_out(37 * 90);
    const MatrixView xv = MatrixView::row_major(x.data(), t, 37, 80, 80);
    const MatrixView wt = MatrixView::row_major(w.data(), tw, 90, 80, 80).transposed();
    gemm(xv, wt, MutableMatrixView::row_major(direct.data(), DType::F32, 37, 90, 90));
    const PackedMatrix packed = pack_b(wt, t);
    gemm_prepacked(xv, packed,
                   MutableMatrixView::row_major(packed_out.data(), DType::F32, 37, 90, 90));
    EXPECT_EQ(direct, packed_out) << "same kernel, same packing: bit-identical";
  }
}

TEST_P(GemmTest, PrepackedSubBlocksMatchSlicedProducts) {
  // Attention multiplies by slices of packed K^T (columns) and V (rows).
  std::mt19937 rng(9);
  for (DType t : {DType::F32, DType::BF16}) {
    const int64_t m = 19, k = 70, n = 100;
    Buffer a(t, m * k, rng), b(t, k * n, rng);
    const PackedMatrix packed = pack_b(MatrixView::row_major(b.data(), t, k, n, n), t);
    const std::size_t es = dtype_size(t);
    struct Slice {
      int64_t k0, k1, n0, n1;
    };
    for (const Slice sl : {Slice{0, 70, 32, 100}, Slice{6, 40, 0, 64}, Slice{2, 68, 64, 97}}) {
      const int64_t kk = sl.k1 - sl.k0, nn = sl.n1 - sl.n0;
      std::vector<float> got(static_cast<std::size_t>(m * nn)), want(got.size());
      const MatrixView a_cols =
          MatrixView::row_major(static_cast<char*>(a.data()) + sl.k0 * es, t, m, kk, k);
      gemm_prepacked(a_cols, packed,
                     MutableMatrixView::row_major(got.data(), DType::F32, m, nn, nn), {},
                     {sl.k0, sl.k1, sl.n0, sl.n1});
      gemm(a_cols,
           MatrixView::row_major(static_cast<char*>(b.data()) + (sl.k0 * n + sl.n0) * es, t, kk, nn,
                                 n),
           MutableMatrixView::row_major(want.data(), DType::F32, m, nn, nn));
      EXPECT_EQ(got, want) << "rows [" << sl.k0 << ", " << sl.k1 << ") cols [" << sl.n0 << ", "
                           << sl.n1 << ")";
    }
    EXPECT_THROW(gemm_prepacked(MatrixView::row_major(a.data(), t, m, k - 1, k), packed,
                                MutableMatrixView::row_major(nullptr, DType::F32, m, n, n), {},
                                {1, 70, 0, -1}),
                 Error)
        << "odd start row";
  }
}

// bf16 x bf16 with K a multiple of 32: partial 16-row tiles, partial panels, every epilogue
// input, both output dtypes, a strided A and a prepacked sub-block. These run on AMX tiles where
// the machine has them (at the avx512bf16 level), otherwise on the level's own bf16 kernel.
void check_bf16_k32_cases() {
  uint32_t seed = 500;
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 32},
                                {15, 33, 64},
                                {16, 32, 96},
                                {17, 31, 32},
                                {33, 65, 160},
                                {100, 70, 2048}}) {
    check_case({m, n, k, DType::BF16, DType::BF16, DType::BF16}, seed++);
    Case fused{m, n, k, DType::BF16, DType::BF16, DType::F32};
    fused.ep.alpha = 0.5f;
    fused.ep.beta = 0.25f;
    fused.ep.activation = Activation::GeluTanh;
    fused.with_bias = fused.with_residual = true;
    check_case(fused, seed++);
    Case relu{m, n, k, DType::BF16, DType::BF16, DType::BF16};
    relu.ep.activation = Activation::ReLU;
    relu.with_bias = true;
    check_case(relu, seed++);
  }
  // A with a row stride wider than K, times rows [32, 96) of a packed B.
  std::mt19937 rng(11);
  const int64_t m = 37, k = 130, n = 90;
  Buffer a(DType::BF16, m * k, rng), b(DType::BF16, k * n, rng);
  const PackedMatrix packed =
      pack_b(MatrixView::row_major(b.data(), DType::BF16, k, n, n), DType::BF16);
  std::vector<float> got(static_cast<std::size_t>(m * n)), want(got.size());
  const MatrixView a_cols =
      MatrixView::row_major(static_cast<char*>(a.data()) + 32 * 2, DType::BF16, m, 64, k);
  gemm_prepacked(a_cols, packed, MutableMatrixView::row_major(got.data(), DType::F32, m, n, n), {},
                 {32, 96, 0, -1});
  gemm_reference(
      a_cols,
      MatrixView::row_major(static_cast<char*>(b.data()) + 32 * n * 2, DType::BF16, 64, n, n),
      MutableMatrixView::row_major(want.data(), DType::F32, m, n, n));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * 64) << "element " << i;
}

// AMX tiles run at the amx kernel level only (the level is skipped where the CPU or OS lacks
// them).
TEST_P(GemmTest, Bf16AmxPathMatchesReference) {
  if (const std::string why = test_support::amx_missing(isa()); !why.empty()) GTEST_SKIP() << why;
  check_bf16_k32_cases();
}

// The same cases below AMX: vdpbf16ps at the avx512bf16 level, each lower level's own path.
TEST_P(GemmTest, Bf16WithAmxOffMatchesReference) {
  if (isa() >= IsaLevel::Amx)
    GTEST_SKIP() << "the amx level runs the tiles (Bf16AmxPathMatchesReference)";
  check_bf16_k32_cases();
}

TEST_P(GemmTest, BatchedMatchesOneByOne) {
  std::mt19937 rng(11);
  const int64_t batch = 5, m = 9, n = 20, k = 33;
  Buffer a(DType::BF16, batch * m * k, rng), b(DType::BF16, batch * k * n, rng);
  std::vector<float> together(batch * m * n), apart(batch * m * n);
  gemm_batched(batch, MatrixView::row_major(a.data(), DType::BF16, m, k, k),
               MatrixView::row_major(b.data(), DType::BF16, k, n, n),
               MutableMatrixView::row_major(together.data(), DType::F32, m, n, n),
               {m * k, k * n, m * n, 0});
  for (int64_t i = 0; i < batch; ++i)
    gemm(MatrixView::row_major(static_cast<uint16_t*>(a.data()) + i * m * k, DType::BF16, m, k, k),
         MatrixView::row_major(static_cast<uint16_t*>(b.data()) + i * k * n, DType::BF16, k, n, n),
         MutableMatrixView::row_major(apart.data() + i * m * n, DType::F32, m, n, n));
  EXPECT_EQ(together, apart);
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(GemmTest);

TEST(Gemm, ShapeMismatchIsAClearError) {
  float a[6] = {}, b[6] = {}, c[4] = {};
  try {
    gemm(MatrixView::row_major(a, DType::F32, 2, 3, 3),
         MatrixView::row_major(b, DType::F32, 2, 3, 3),
         MutableMatrixView::row_major(c, DType::F32, 2, 3, 3));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("[gemm] inner dimensions differ: A is [2, 3], B is [2, 3]"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gemm(MatrixView::row_major(a, DType::I32, 2, 3, 3),
                    MatrixView::row_major(b, DType::F32, 3, 2, 2),
                    MutableMatrixView::row_major(c, DType::F32, 2, 2, 2)),
               Error);
}

TEST(Gemm, PrepackedAtAnotherLevelIsRejected) {
  if (!isa_supported(IsaLevel::Avx2)) GTEST_SKIP() << "needs two kernel levels";
  float w[4] = {1, 2, 3, 4}, x[2] = {1, 1}, y[2];
  PackedMatrix packed;
  {
    ScopedIsa level(IsaLevel::Scalar);
    packed = pack_b(MatrixView::row_major(w, DType::F32, 2, 2, 2), DType::F32);
  }
  ScopedIsa level(IsaLevel::Avx2);
  EXPECT_THROW(gemm_prepacked(MatrixView::row_major(x, DType::F32, 1, 2, 2), packed,
                              MutableMatrixView::row_major(y, DType::F32, 1, 2, 2)),
               Error);
}

// bf16 x bf16 below AMX: vdpbf16ps, except on a core where it issues at half rate (Intel's AMX
// cores), where the f32 FMA micro-kernel is twice as fast. The two round differently where it
// shows: vdpbf16ps reads a bf16 subnormal as zero, widening keeps it. A caller that chose bf16
// pairs (allocate_packed_b) gets them, and they multiply as vdpbf16ps does. Decided from
// cpuid: the same every run.
TEST(Gemm, Bf16BelowAmxWidensWhereVdpbf16psIsHalfRate) {
  if (!isa_supported(IsaLevel::Avx512Bf16))
    GTEST_SKIP() << "vdpbf16ps needs the avx512bf16 level; this CPU (" << cpu_features().model
                 << ") lacks it";
  ScopedIsa level(IsaLevel::Avx512Bf16);
  const float tiny = std::ldexp(1.0f, -130);  // a bf16 subnormal
  const float af[2] = {tiny, 0.0f}, bf[2] = {1.0f, 0.0f};
  uint16_t a[2], b[2];
  convert(af, DType::F32, a, DType::BF16, 2);
  convert(bf, DType::F32, b, DType::BF16, 2);
  const MatrixView av = MatrixView::row_major(a, DType::BF16, 1, 2, 2);
  const MatrixView bv = MatrixView::row_major(b, DType::BF16, 2, 1, 1);
  float c = -1.0f;
  gemm(av, bv, MutableMatrixView::row_major(&c, DType::F32, 1, 1, 1));
  const bool widen = vdpbf16ps_at_half_rate();
  EXPECT_EQ(c, widen ? tiny : 0.0f);
  EXPECT_EQ(pack_b(bv, DType::BF16).compute_dtype(), widen ? DType::F32 : DType::BF16);
  EXPECT_EQ(gemm_packs_transposed_a(DType::BF16, DType::BF16), !widen);

  PackedMatrix pairs = allocate_packed_b(2, 1, DType::BF16, DType::BF16);
  ASSERT_EQ(pairs.compute_dtype(), DType::BF16);
  std::memset(pairs.mutable_panels(), 0, static_cast<std::size_t>(pairs.k_padded() * pairs.nr()) * 2);
  static_cast<uint16_t*>(pairs.mutable_panels())[0] = b[0];  // element (0, 0)
  c = -1.0f;
  gemm_prepacked(av, pairs, MutableMatrixView::row_major(&c, DType::F32, 1, 1, 1));
  EXPECT_EQ(c, 0.0f);
}

}  // namespace
}  // namespace mixprec::kernels
