#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/resample.h"
#include "support/isa_levels.h"
#include "support/tolerance.h"

namespace mixprec {
// Test names and failure messages print a bf16 mode's name, not "1-byte object <01>".
inline void PrintTo(Bf16ConvCompute m, std::ostream* os) { *os << bf16_conv_compute_name(m); }
}  // namespace mixprec

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
  // Two pixels wide, pad 2, dilation 2: the outer taps of each row miss the whole tile (the
  // direct driver skips them) and the middle one hits it; even channels for the bf16 tiles.
  Case miss{1, 8, 5, 2, 16, 3, 3};
  miss.opt.pad_h = miss.opt.pad_w = 2;
  miss.opt.dilation_h = miss.opt.dilation_w = 2;
  miss.x_dtype = miss.w_dtype = DType::BF16;
  check(miss, seed++);
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
    // ConvNeXt's 7x7 (PeakNet): 20 channels leave a 4-lane tail; no epilogue, rows converted
    // whole; and a stride-2 one.
    Case dw7{2, 20, 9, 12, 20, 7, 7};
    dw7.opt.groups = 20;
    dw7.opt.pad_h = dw7.opt.pad_w = 3;
    dw7.x_dtype = dw7.w_dtype = dw7.out_dtype = t;
    check(dw7, seed++);
    dw7.opt.stride_h = dw7.opt.stride_w = 2;
    check(dw7, seed++);
    // Dilated: a 16-bit input's rows are widened into a ring of KH * dilation rows, and the
    // rows of one output row (3 apart: KH rows would put all three in one slot) must never
    // evict each other, across samples too.
    Case dilated{2, 20, 13, 12, 20, 3, 3};
    dilated.opt.groups = 20;
    dilated.opt.dilation_h = dilated.opt.dilation_w = 3;
    dilated.opt.pad_h = dilated.opt.pad_w = 3;
    dilated.x_dtype = dilated.w_dtype = dilated.out_dtype = t;
    check(dilated, seed++);
  }
}

// One input channel read by every output channel (a detector frame into PeakNet's stem 3x3 and
// its 2x2 stride-2 patchify): the depthwise row kernels with the input broadcast. Output
// channel counts 1, 3, 8, 16 and 24 (tails and whole vectors), odd sizes, both layouts of the
// output, bias, activation and residual, and the prepacked entry.
TEST_P(ConvTest, OneInputChannel) {
  uint64_t seed = 80;
  for (const int64_t o : {1, 3, 8, 16, 24})
    for (DType t : {DType::F32, DType::BF16}) {
      Case stem{2, 1, 11, 13, o, 3, 3};
      stem.opt.pad_h = stem.opt.pad_w = 1;
      stem.x_dtype = stem.w_dtype = stem.out_dtype = t;
      check(stem, seed++);
      Case patchify{1, 1, 10, 14, o, 2, 2};
      patchify.opt.stride_h = patchify.opt.stride_w = 2;
      patchify.x_dtype = patchify.w_dtype = patchify.out_dtype = t;
      patchify.out_format = MemoryFormat::Contiguous;
      check(patchify, seed++);
    }
  Case fused{1, 1, 9, 7, 5, 5, 3};
  fused.opt.pad_h = 2;
  fused.opt.stride_w = 2;
  fused.opt.dilation_h = 2;
  fused.opt.pad_h = 4;
  fused.opt.activation = Activation::GeluErf;
  fused.with_residual = true;
  check(fused, seed++);
  // The prepacked entry keeps the weight for the row kernels: the same bits as per call.
  Generator gen(seed);
  const Tensor x = Tensor::uniform({2, 1, 12, 16}, -1, 1, gen, DType::BF16);
  const Tensor w = Tensor::uniform({8, 1, 3, 3}, -1, 1, gen, DType::BF16);
  const Tensor b = Tensor::uniform({8}, -1, 1, gen, DType::F32);
  Conv2dOptions opt;
  opt.pad_h = opt.pad_w = 1;
  const Tensor want = Tensor::empty({2, 8, 12, 16}, DType::BF16, MemoryFormat::ChannelsLast);
  const Tensor got = Tensor::empty({2, 8, 12, 16}, DType::BF16, MemoryFormat::ChannelsLast);
  conv2d(x, w, &b, want, opt);
  conv2d(x, pack_conv_weights(w, DType::BF16, 1), &b, got, opt);
  EXPECT_EQ(0, std::memcmp(want.data_ptr(), got.data_ptr(), 2 * 8 * 12 * 16 * 2));
}

// A 1x1 with few channels (at most 32 in and out, no epilogue: PeakNet's laterals, to_stem and
// head) runs on pixel vectors instead of the GEMM: channel counts 2-32 with tails, pixel counts
// that leave a partial block, mixed dtypes, both output layouts; with an epilogue the GEMM runs.
TEST_P(ConvTest, PointwiseFewChannels) {
  uint64_t seed = 100;
  for (const auto& [c, o] : {std::pair{4, 2}, std::pair{8, 4}, std::pair{16, 8}, std::pair{32, 16},
                             std::pair{3, 24}, std::pair{24, 3}, std::pair{2, 32}})
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      Case pw{2, c, 17, 19, o, 1, 1};
      pw.x_dtype = pw.w_dtype = pw.out_dtype = t;
      check(pw, seed++);
    }
  Case mixed{1, 8, 9, 30, 4, 1, 1};
  mixed.x_dtype = DType::BF16;
  mixed.out_dtype = DType::F32;
  mixed.out_format = MemoryFormat::Contiguous;
  mixed.with_bias = false;
  check(mixed, seed++);
  Case epilogue{1, 8, 9, 11, 4, 1, 1};
  epilogue.opt.activation = Activation::GeluErf;
  epilogue.with_residual = true;
  check(epilogue, seed++);
  // Packed once, the same bits as per call, with and without an epilogue.
  Generator gen(seed);
  const Tensor x =
      Tensor::uniform({1, 8, 13, 21}, -1, 1, gen, DType::BF16).to(MemoryFormat::ChannelsLast);
  const Tensor w = Tensor::uniform({4, 8, 1, 1}, -1, 1, gen, DType::BF16);
  const PackedConvWeights packed = pack_conv_weights(w, DType::BF16, 1);
  for (const Activation act : {Activation::None, Activation::SiLU}) {
    Conv2dOptions opt;
    opt.activation = act;
    const Tensor want = Tensor::empty({1, 4, 13, 21}, DType::BF16, MemoryFormat::ChannelsLast);
    const Tensor got = Tensor::empty({1, 4, 13, 21}, DType::BF16, MemoryFormat::ChannelsLast);
    conv2d(x, w, nullptr, want, opt);
    conv2d(x, packed, nullptr, got, opt);
    EXPECT_EQ(0, std::memcmp(want.data_ptr(), got.data_ptr(), 4 * 13 * 21 * 2));
  }
}

// f32 weights over 1 MiB are walked panel by panel over all rows (run_direct's panel_outer).
TEST_P(ConvTest, LargeWeightsPanelByPanel) {
  Case c{2, 256, 5, 6, 160, 3, 3};
  c.opt.pad_h = c.opt.pad_w = 1;
  c.opt.activation = Activation::GeluTanh;
  check(c, 90);
}

TEST_P(ConvTest, MixedF32InputBf16Weights) {
  Case c{1, 16, 8, 8, 32, 3, 3};
  c.opt.pad_h = c.opt.pad_w = 1;
  c.w_dtype = DType::BF16;
  check(c, 80);
}

// bf16 input with f32 weights, 32 channels (a shape the bf16 AMX path takes when both are bf16):
// the weights are not bf16, so the input is widened for the f32 kernels; per call and packed.
TEST_P(ConvTest, MixedBf16InputF32Weights) {
  Case c{1, 32, 6, 7, 32, 3, 3};
  c.opt.pad_h = c.opt.pad_w = 1;
  c.x_dtype = c.out_dtype = DType::BF16;
  check(c, 81);
  Generator gen(82);
  const Tensor x = Tensor::uniform({1, 32, 6, 7}, -1, 1, gen, DType::BF16);
  const Tensor w = Tensor::uniform({32, 32, 3, 3}, -1, 1, gen, DType::F32);
  const Tensor want = Tensor::empty({1, 32, 6, 7}, DType::BF16);
  const Tensor got = Tensor::empty({1, 32, 6, 7}, DType::BF16);
  conv2d(x, w, nullptr, want, c.opt);
  conv2d(x, pack_conv_weights(w, DType::BF16), nullptr, got, c.opt);
  EXPECT_EQ(0, std::memcmp(want.data_ptr(), got.data_ptr(), want.numel() * 2));
}

constexpr Bf16ConvCompute kBf16Modes[] = {Bf16ConvCompute::Auto, Bf16ConvCompute::DotProduct,
                                          Bf16ConvCompute::WidenToF32};

// The bf16 tests once per kernel level and bf16 compute mode (Auto runs AMX at the amx level).
// A mode whose own path cannot run at the level is skipped, naming what is missing (DotProduct
// below avx512bf16); a level this machine lacks is skipped.
class ConvBf16Test : public ::testing::TestWithParam<std::tuple<IsaLevel, Bf16ConvCompute>> {
 protected:
  void SetUp() override {
    const auto [level, mode] = GetParam();
    if (!isa_supported(level))
      GTEST_SKIP() << "kernel level " << isa_name(level) << " is not supported by this CPU ("
                   << cpu_features().model << ")";
    if (mode == Bf16ConvCompute::DotProduct)
      if (const std::string why =
              test_support::level_missing("vdpbf16ps", IsaLevel::Avx512Bf16, level);
          !why.empty())
        GTEST_SKIP() << why;
    DispatchConfig config = dispatch_config();
    config.level = level;
    config.bf16_conv = mode;
    scope_ = std::make_unique<ScopedDispatch>(config);
  }
  void TearDown() override { scope_.reset(); }

 private:
  std::unique_ptr<ScopedDispatch> scope_;
};

std::string bf16_test_name(
    const ::testing::TestParamInfo<std::tuple<IsaLevel, Bf16ConvCompute>>& info) {
  return std::string(isa_name(std::get<0>(info.param))) + "_" +
         std::string(bf16_conv_compute_name(std::get<1>(info.param)));
}

// Channel counts that are multiples of 32 take the AMX tiles (auto, amx level), even ones
// vdpbf16ps, the rest f32: every bf16 path, under each mode, with the shapes that stress its
// edges (partial 16-pixel segments, padding on every side, strides, dilation, groups, partial
// 32-column panels, each epilogue, NCHW in and out).
TEST_P(ConvBf16Test, DirectPaths) {
  std::vector<Case> cases;
  auto bf16 = [](Case c) {
    c.x_dtype = c.w_dtype = c.out_dtype = DType::BF16;
    return c;
  };
  Case base = bf16({1, 32, 16, 16, 32, 3, 3});
  base.opt.pad_h = base.opt.pad_w = 1;
  cases.push_back(base);
  Case odd = bf16({2, 64, 9, 19, 40, 3, 3});  // OW 19: a 3-pixel segment; O 40: partial panel
  odd.opt.pad_h = odd.opt.pad_w = 1;
  cases.push_back(odd);
  Case strided = bf16({1, 32, 17, 33, 64, 3, 3});
  strided.opt.stride_h = strided.opt.stride_w = 2;
  strided.opt.pad_h = strided.opt.pad_w = 1;
  cases.push_back(strided);
  Case dilated = bf16({1, 32, 12, 20, 32, 3, 3});
  dilated.opt.dilation_h = dilated.opt.dilation_w = 2;
  dilated.opt.pad_h = 2;
  dilated.opt.pad_w = 3;
  cases.push_back(dilated);
  Case unpadded = bf16({1, 32, 7, 40, 16, 3, 5});
  cases.push_back(unpadded);
  // Two segments of one AMX unit from different images whose input rows share ring slots
  // (image 0 row 9 and image 1 row 10): they run one at a time.
  Case far_rows = bf16({2, 32, 15, 8, 32, 3, 3});
  far_rows.opt.dilation_h = 5;
  cases.push_back(far_rows);
  Case grouped = bf16({1, 64, 8, 8, 64, 3, 3});
  grouped.opt.groups = 2;
  grouped.opt.pad_h = grouped.opt.pad_w = 1;
  cases.push_back(grouped);
  Case fused = bf16({1, 32, 6, 18, 48, 3, 3});
  fused.opt.pad_h = fused.opt.pad_w = 1;
  fused.opt.activation = Activation::SiLU;
  fused.with_residual = true;
  cases.push_back(fused);
  Case relu_f32_out = bf16({1, 32, 5, 16, 32, 3, 3});
  relu_f32_out.opt.pad_h = relu_f32_out.opt.pad_w = 1;
  relu_f32_out.opt.activation = Activation::ReLU;
  relu_f32_out.out_dtype = DType::F32;
  cases.push_back(relu_f32_out);
  Case nchw = bf16({1, 32, 8, 8, 32, 3, 3});
  nchw.opt.pad_h = nchw.opt.pad_w = 1;
  nchw.x_format = nchw.out_format = MemoryFormat::Contiguous;
  nchw.with_bias = false;
  cases.push_back(nchw);
  Case padded_1x1 = bf16({1, 32, 4, 4, 32, 1, 1});
  padded_1x1.opt.pad_h = padded_1x1.opt.pad_w = 1;
  cases.push_back(padded_1x1);
  Case odd_channels = bf16({1, 18, 6, 6, 32, 3, 3});  // even, not a multiple of 32
  odd_channels.opt.pad_h = odd_channels.opt.pad_w = 1;
  cases.push_back(odd_channels);
  Case two_groups = bf16({2, 64, 64, 64, 16, 3, 3});  // over 512 KiB per padded image: the
  two_groups.opt.pad_h = two_groups.opt.pad_w = 1;    // AMX path copies one image at a time
  cases.push_back(two_groups);
  uint64_t seed = 100;
  for (const Case& c : cases) check(c, seed++);
}

// An output channel's sums do not depend on the channels computed beside it: 96 output
// channels (three 32-column panels; 13 pixels a row, so a partial tile) give the same bits as
// three convolutions of 32 channels each, with the bias, SiLU and residual split alike.
TEST_P(ConvBf16Test, SplittingTheOutputChannelsChangesNoBit) {
  Generator gen(77);
  const Tensor x =
      Tensor::randn({1, 64, 5, 13}, gen).to(DType::BF16).to(MemoryFormat::ChannelsLast);
  const Tensor w = Tensor::randn({96, 64, 3, 3}, gen, DType::BF16);
  const Tensor b = Tensor::randn({96}, gen, DType::BF16);
  const Tensor r =
      Tensor::randn({1, 96, 5, 13}, gen).to(DType::BF16).to(MemoryFormat::ChannelsLast);
  Conv2dOptions opt;
  opt.pad_h = opt.pad_w = 1;
  opt.activation = Activation::SiLU;
  const Tensor whole = Tensor::empty({1, 96, 5, 13}, DType::BF16, MemoryFormat::ChannelsLast);
  opt.residual = &r;
  conv2d(x, w, &b, whole, opt);
  for (int64_t o0 = 0; o0 < 96; o0 += 32) {
    const Tensor part = Tensor::empty({1, 32, 5, 13}, DType::BF16, MemoryFormat::ChannelsLast);
    const Tensor r_part = r.slice(1, o0, o0 + 32).contiguous(MemoryFormat::ChannelsLast);
    const Tensor b_part = b.slice(0, o0, o0 + 32).contiguous();
    opt.residual = &r_part;
    conv2d(x, w.slice(0, o0, o0 + 32).contiguous(), &b_part, part, opt);
    const Tensor want = whole.slice(1, o0, o0 + 32).contiguous();
    const Tensor got = part.contiguous();
    EXPECT_EQ(
        0, std::memcmp(want.data_ptr(), got.data_ptr(), static_cast<std::size_t>(got.numel()) * 2))
        << "output channels " << o0 << ".." << o0 + 31;
  }
}

// A few output channels (an RGB head's 3 or 7, a panel's last 8) are sums of the same terms in
// the same order as in a wide convolution: the narrow tiles compute only the columns they need.
// bf16 and f32 inputs, so both direct kernels (and the other paths) are covered.
TEST_P(ConvBf16Test, NarrowOutputsGiveTheWideConvolutionsBits) {
  Generator gen(78);
  for (const DType t : {DType::BF16, DType::F32}) {
    const Tensor x = Tensor::randn({1, 32, 6, 15}, gen).to(t).to(MemoryFormat::ChannelsLast);
    const Tensor w = Tensor::randn({48, 32, 3, 3}, gen, t);
    const Tensor b = Tensor::randn({48}, gen, t);
    Conv2dOptions opt;
    opt.pad_h = opt.pad_w = 1;
    opt.activation = Activation::SiLU;
    const Tensor whole = Tensor::empty({1, 48, 6, 15}, t, MemoryFormat::ChannelsLast);
    conv2d(x, w, &b, whole, opt);
    for (const int64_t o : {3, 7, 16, 20, 40}) {
      const Tensor part = Tensor::empty({1, o, 6, 15}, t, MemoryFormat::ChannelsLast);
      const Tensor b_part = b.slice(0, 0, o).contiguous();
      conv2d(x, w.slice(0, 0, o).contiguous(), &b_part, part, opt);
      const Tensor want = whole.slice(1, 0, o).contiguous(), got = part.contiguous();
      EXPECT_EQ(0, std::memcmp(want.data_ptr(), got.data_ptr(), got.nbytes()))
          << dtype_name(t) << ", " << o << " output channels";
    }
  }
}

// What a graph's fusions ask of the packed paths, bit for bit against the unfused ops: reading x
// nearest-upsampled (input_scale: upsample then convolve, without the upsampled tensor) and
// writing into a channel slice of a wider channels_last tensor (a concatenation's part, without
// the copy). Every path: AMX (32k channels), vdpbf16ps (even), f32 (odd, or f32 x), the 1x1
// (which the pointwise GEMM declines when upsampled) and im2col at the scalar level; two images,
// strides, a partial panel, and the epilogue (bias, SiLU, a residual whose rows are not the
// output's).
TEST_P(ConvBf16Test, UpsampledInputAndChannelSliceOutputChangeNoBit) {
  struct C {
    int64_t n, c, h, w, o, k, stride, scale;
    DType t;
  };
  Generator gen(21);
  for (const C& c :
       {C{1, 64, 8, 8, 64, 3, 1, 2, DType::BF16}, C{2, 32, 5, 7, 40, 3, 1, 2, DType::BF16},
        C{1, 6, 4, 9, 32, 3, 1, 4, DType::BF16}, C{1, 5, 6, 5, 16, 3, 2, 2, DType::BF16},
        C{2, 64, 4, 6, 32, 1, 1, 2, DType::BF16}, C{1, 12, 5, 6, 20, 3, 1, 2, DType::F32}}) {
    SCOPED_TRACE("x [" + std::to_string(c.n) + ", " + std::to_string(c.c) + ", " +
                 std::to_string(c.h) + ", " + std::to_string(c.w) + "] " +
                 std::string(dtype_name(c.t)) + ", " + std::to_string(c.k) + "x" +
                 std::to_string(c.k) + " to " + std::to_string(c.o) + ", stride " +
                 std::to_string(c.stride) + ", scale " + std::to_string(c.scale));
    const Tensor x =
        Tensor::uniform({c.n, c.c, c.h, c.w}, -1, 1, gen, c.t).to(MemoryFormat::ChannelsLast);
    const Tensor w = Tensor::uniform({c.o, c.c, c.k, c.k}, -1, 1, gen, c.t);
    const Tensor b = Tensor::uniform({c.o}, -1, 1, gen, DType::F32);
    const Tensor up =
        Tensor::empty({c.n, c.c, c.h * c.scale, c.w * c.scale}, c.t, MemoryFormat::ChannelsLast);
    upsample2d(x, up, UpsampleMode::Nearest);
    Conv2dOptions opt;
    opt.pad_h = opt.pad_w = c.k / 2;
    opt.stride_h = opt.stride_w = c.stride;
    opt.activation = Activation::SiLU;
    const int64_t oh = conv_output_size(c.h * c.scale, c.k, c.stride, c.k / 2, 1);
    const int64_t ow = conv_output_size(c.w * c.scale, c.k, c.stride, c.k / 2, 1);
    const Tensor r =
        Tensor::uniform({c.n, c.o, oh, ow}, -1, 1, gen, c.t).to(MemoryFormat::ChannelsLast);
    opt.residual = &r;
    const PackedConvWeights packed = pack_conv_weights(w, c.t);
    ASSERT_TRUE(conv2d_runs_packed(packed, opt));
    const Tensor want = Tensor::empty({c.n, c.o, oh, ow}, c.t, MemoryFormat::ChannelsLast);
    conv2d(up, packed, &b, want, opt);

    // The output as channels [3, 3 + O) of a channels_last tensor of O + 7 channels.
    const Tensor wide = Tensor::full({c.n, c.o + 7, oh, ow}, 5.0, c.t, MemoryFormat::ChannelsLast);
    const Tensor slice = wide.slice(1, 3, 3 + c.o);
    opt.input_scale = c.scale;
    conv2d(x, packed, &b, slice, opt);
    const Tensor a = want.to(DType::F32).contiguous(), g = slice.to(DType::F32).contiguous();
    EXPECT_EQ(0, std::memcmp(a.data_ptr(), g.data_ptr(), a.numel() * sizeof(float)));
    for (const Tensor& rest : {wide.slice(1, 0, 3), wide.slice(1, 3 + c.o)}) {
      const Tensor v = rest.to(DType::F32).contiguous();
      for (int64_t i = 0; i < v.numel(); ++i)
        ASSERT_EQ(v.data<float>()[i], 5.0f) << "wrote outside its channels";
    }
  }
}

// Outputs of one pixel per image, [N, C, 1, 1], are dense as channels_last whatever their
// strides say: made contiguous (stride(3) = 1), the pixels are still C elements apart. A
// stride read from the size-1 dim wrote every image over the first's channels.
TEST_P(ConvBf16Test, OnePixelOutputsOfSeveralImages) {
  Generator gen(23);
  for (const DType t : {DType::BF16, DType::F32}) {
    const Tensor x = Tensor::uniform({3, 32, 3, 3}, -1, 1, gen, t);
    const Tensor w = Tensor::uniform({40, 32, 3, 3}, -1, 1, gen, t);
    const Tensor nchw = Tensor::empty({3, 40, 1, 1}, t);  // strides [40, 1, 1, 1]
    const Tensor nhwc = Tensor::empty({3, 40, 1, 1}, t, MemoryFormat::ChannelsLast);
    ASSERT_TRUE(nchw.is_contiguous(MemoryFormat::ChannelsLast));
    conv2d(x, w, nullptr, nchw);
    conv2d(x, w, nullptr, nhwc);
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor alone = Tensor::empty({1, 40, 1, 1}, t);
      conv2d(x.narrow(0, i, 1).contiguous(), w, nullptr, alone);
      const Tensor a = alone.to(DType::F32).contiguous();
      for (const Tensor& both : {nchw, nhwc}) {
        const Tensor b = both.narrow(0, i, 1).to(DType::F32).contiguous();
        EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), 40 * sizeof(float)))
            << dtype_name(t) << " image " << i;
      }
    }
  }
}

// The bf16 store rounds once, RNE, keeping subnormals (the conversion rule): a subnormal f32
// bias over zero products must come out as the conversion kernel rounds it, under every mode.
TEST_P(ConvBf16Test, OutputKeepsSubnormals) {
  const Tensor x = Tensor::zeros({1, 32, 4, 20}, DType::BF16).to(MemoryFormat::ChannelsLast);
  const Tensor w = Tensor::zeros({32, 32, 3, 3}, DType::BF16);
  Tensor b = Tensor::empty({32}, DType::F32);
  for (int64_t i = 0; i < 32; ++i) b.data<float>()[i] = (i % 2 ? -1.0f : 1.0f) * 1e-39f * (i + 1);
  const Tensor want = b.to(DType::BF16).to(DType::F32);
  Conv2dOptions opt;
  opt.pad_h = opt.pad_w = 1;
  const Tensor out = Tensor::empty({1, 32, 4, 20}, DType::BF16, MemoryFormat::ChannelsLast);
  conv2d(x, w, &b, out, opt);
  const Tensor got = out.to(DType::F32).contiguous();
  for (int64_t o = 0; o < 32; ++o)
    ASSERT_EQ(got.data<float>()[o * 80 + 5], want.data<float>()[o]) << "channel " << o;
}

INSTANTIATE_TEST_SUITE_P(IsaMode, ConvBf16Test,
                         ::testing::Combine(::testing::ValuesIn(kAllIsaLevels),
                                            ::testing::ValuesIn(kBf16Modes)),
                         bf16_test_name);

// The bf16 modes round as docs/NUMERICS.md says: vdpbf16ps reads a subnormal bf16 input as
// zero, widening to f32 keeps it; Auto is vdpbf16ps on a CPU without AMX and widens on one with
// AMX (32 channels take AMX tiles only at the amx level, which also flush). Deterministic: the
// same answer every run.
TEST(ConvBf16Modes, SubnormalInputsFollowTheMode) {
  if (!isa_supported(IsaLevel::Avx512Bf16))
    GTEST_SKIP() << "vdpbf16ps needs the avx512bf16 level; this CPU (" << cpu_features().model
                 << ") lacks it";
  const float tiny = std::ldexp(1.0f, -130);  // a bf16 subnormal
  Tensor xf = Tensor::zeros({1, 32, 4, 4});
  xf.data<float>()[1 * 4 + 1] = tiny;  // channel 0, pixel (1, 1)
  Tensor wf = Tensor::zeros({16, 32, 3, 3});
  for (int64_t o = 0; o < 16; ++o) wf.data<float>()[o * 32 * 9 + 4] = 1.0f;  // centre tap, c 0
  const Tensor x = xf.to(DType::BF16), w = wf.to(DType::BF16);
  Conv2dOptions opt;
  opt.pad_h = opt.pad_w = 1;
  auto centre = [&](Bf16ConvCompute mode) {
    DispatchConfig config = dispatch_config();
    config.level = IsaLevel::Avx512Bf16;
    config.bf16_conv = mode;
    const ScopedDispatch scope(config);
    const Tensor out = Tensor::empty({1, 16, 4, 4});
    conv2d(x, w, nullptr, out, opt);
    return out.contiguous().data<float>()[1 * 4 + 1];  // channel 0, pixel (1, 1)
  };
  EXPECT_EQ(centre(Bf16ConvCompute::DotProduct), 0.0f);
  EXPECT_EQ(centre(Bf16ConvCompute::WidenToF32), tiny);
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(centre(Bf16ConvCompute::Auto), f.amx_tile && f.amx_bf16 ? tiny : 0.0f);
}

// pack_conv_weights once, then conv2d with the packing: the same result as packing per call,
// bit for bit (the same kernels run), for every dtype path, groups and depthwise.
TEST_P(ConvTest, PrepackedWeightsMatchPerCallPacking) {
  Generator gen(7);
  struct P {
    int64_t c, o, groups;
    DType t;
  };
  for (const P& p :
       {P{32, 64, 1, DType::BF16}, P{17, 33, 1, DType::F32}, P{64, 64, 2, DType::BF16},
        P{16, 16, 16, DType::F32}, P{24, 8, 1, DType::F16}, P{6, 10, 1, DType::BF16}}) {
    SCOPED_TRACE("c " + std::to_string(p.c) + " o " + std::to_string(p.o) + " groups " +
                 std::to_string(p.groups) + " " + std::string(dtype_name(p.t)));
    const Tensor x =
        Tensor::uniform({2, p.c, 9, 21}, -1, 1, gen, p.t).to(MemoryFormat::ChannelsLast);
    const Tensor w = Tensor::uniform({p.o, p.c / p.groups, 3, 3}, -1, 1, gen, p.t);
    const Tensor b = Tensor::uniform({p.o}, -1, 1, gen, DType::F32);
    Conv2dOptions opt;
    opt.pad_h = opt.pad_w = 1;
    opt.groups = p.groups;
    const Tensor want = Tensor::empty({2, p.o, 9, 21}, p.t, MemoryFormat::ChannelsLast);
    const Tensor got = Tensor::empty({2, p.o, 9, 21}, p.t, MemoryFormat::ChannelsLast);
    conv2d(x, w, &b, want, opt);
    const PackedConvWeights packed = pack_conv_weights(w, p.t, p.groups);
    EXPECT_EQ(packed.shape(), w.shape());
    conv2d(x, packed, &b, got, opt);
    const Tensor a = want.to(DType::F32).contiguous(), g = got.to(DType::F32).contiguous();
    EXPECT_EQ(0, std::memcmp(a.data_ptr(), g.data_ptr(), a.numel() * sizeof(float)));
  }
}

MIXPREC_INSTANTIATE_ISA_TEST_SUITE(ConvTest);

TEST(Conv, PrepackedWeightsCheckTheirUse) {
  const Tensor w = Tensor::zeros({8, 4, 3, 3}, DType::BF16);
  const PackedConvWeights packed = pack_conv_weights(w, DType::BF16);
  const Tensor out = Tensor::empty({1, 8, 6, 6}, DType::BF16);
  EXPECT_THROW(conv2d(Tensor::zeros({1, 4, 8, 8}, DType::F32), packed, nullptr, out), Error)
      << "packed for bf16 inputs";
  Conv2dOptions grouped;
  grouped.groups = 2;
  EXPECT_THROW(conv2d(Tensor::zeros({1, 4, 8, 8}, DType::BF16), packed, nullptr, out, grouped),
               Error)
      << "packed for one group";
  EXPECT_THROW(conv2d(Tensor::zeros({1, 4, 8, 8}, DType::BF16), PackedConvWeights(), nullptr, out),
               Error)
      << "empty packing";
  if (active_isa() != IsaLevel::Scalar) {
    const ScopedIsa scalar(IsaLevel::Scalar);
    EXPECT_THROW(conv2d(Tensor::zeros({1, 4, 8, 8}, DType::BF16), packed, nullptr, out), Error)
        << "packed at another kernel level";
  }
}

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
  // An f64 bias or residual with f32 x would not be read by the f32-lane paths: an error.
  const Tensor bias64 = Tensor::zeros({8}, DType::F64), y = Tensor::empty({1, 8, 6, 6});
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 8, 8}), w, &bias64, y), Error);
  Conv2dOptions with_residual;
  const Tensor r64 = Tensor::zeros({1, 8, 6, 6}, DType::F64);
  with_residual.residual = &r64;
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 8, 8}), w, nullptr, y, with_residual), Error);
  // A fused upsample: a power of two, on the packed paths only, never in a backward.
  Conv2dOptions upsampled;
  upsampled.input_scale = 3;
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 2, 2}), w, nullptr, y, upsampled), Error) << "scale 3";
  upsampled.input_scale = 2;
  upsampled.groups = 3;
  const Tensor depthwise_w = Tensor::zeros({3, 1, 3, 3});
  EXPECT_FALSE(conv2d_runs_packed(pack_conv_weights(depthwise_w, DType::F32, 3), upsampled));
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 4, 4}), depthwise_w, nullptr,
                      Tensor::empty({1, 3, 6, 6}), upsampled),
               Error)
      << "depthwise reads no upsampled input";
  upsampled.groups = 1;
  EXPECT_NO_THROW(conv2d(Tensor::zeros({1, 3, 4, 4}), w, nullptr, y, upsampled));
  EXPECT_THROW(
      conv2d_backward(Tensor::zeros({1, 3, 4, 4}), w, Tensor::zeros({1, 8, 6, 6}), upsampled, {}),
      Error)
      << "backward of a fused upsample";
}

// conv2d_backward_into writes the gradients asked for into given tensors, in any layout and
// float dtype, each rounded once: in the returning version's dtypes they are its results bit for
// bit, in f32 they round to them. A tensor of the wrong shape is a clear error.
TEST(Conv, BackwardIntoGivenTensorsWritesWhatItReturns) {
  Generator gen(31);
  const Tensor x = Tensor::randn({2, 16, 6, 6}, gen, DType::BF16).to(MemoryFormat::ChannelsLast);
  const Tensor w = Tensor::randn({8, 16, 3, 3}, gen, DType::BF16);
  const Tensor dy = Tensor::randn({2, 8, 6, 6}, gen, DType::BF16).to(MemoryFormat::ChannelsLast);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  const Conv2dGrads want = conv2d_backward(x, w, dy, o, {true, true, true, DType::F32});
  auto same = [](const Tensor& a, const Tensor& b) {
    const Tensor ac = a.contiguous(), bc = b.contiguous();
    return a.dtype() == b.dtype() && a.shape() == b.shape() &&
           std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
  };
  const Conv2dGrads nchw{Tensor::empty(x.shape(), DType::BF16),
                         Tensor::empty(w.shape(), DType::BF16), Tensor::empty({8}, DType::F32)};
  conv2d_backward_into(x, w, dy, o, nchw);
  EXPECT_TRUE(same(nchw.input, want.input));
  EXPECT_TRUE(same(nchw.weight, want.weight));
  EXPECT_TRUE(same(nchw.bias, want.bias));
  const Conv2dGrads wide{Tensor::empty(x.shape(), DType::F32, MemoryFormat::ChannelsLast),
                         Tensor::empty(w.shape(), DType::F32), Tensor()};
  conv2d_backward_into(x, w, dy, o, wide);
  EXPECT_TRUE(same(wide.input.to(DType::BF16), want.input));
  EXPECT_TRUE(same(wide.weight.to(DType::BF16), want.weight));
  try {
    conv2d_backward_into(x, w, dy, o,
                         {Tensor(), Tensor::empty({8, 16, 1, 1}, DType::F32), Tensor()});
    ADD_FAILURE() << "a weight gradient of the wrong shape was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight gradient"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixprec::kernels
