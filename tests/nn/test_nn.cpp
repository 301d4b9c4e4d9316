#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "mixprec/core/allocator.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"
#include "mixprec/optim/sgd.h"

namespace mixprec::nn {
namespace {

std::shared_ptr<Sequential> mlp(Generator& gen) {
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{
      std::make_shared<Linear>(4, 32, true, gen), std::make_shared<ReLU>(),
      std::make_shared<Linear>(32, 1, true, gen)});
}

TEST(Module, NamesParametersInRegistrationOrder) {
  Generator gen(1);
  auto net = mlp(gen);
  const NamedTensors params = net->named_parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].first, "0.weight");
  EXPECT_EQ(params[1].first, "0.bias");
  EXPECT_EQ(params[3].first, "2.bias");
  EXPECT_EQ(params[0].second.shape(), (Shape{32, 4}));
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  net->eval();
  EXPECT_FALSE(net->named_children()[0].second->training());
}

TEST(Module, StateDictRoundTripsAndNamesProblems) {
  Generator g1(1), g2(2);
  auto a = mlp(g1), b = mlp(g2);
  b->load_state_dict(a->state_dict());
  for (std::size_t i = 0; i < 4; ++i) {
    const Tensor pa = a->parameters()[i].flatten(), pb = b->parameters()[i].flatten();
    for (int64_t j = 0; j < pa.numel(); ++j) ASSERT_EQ(pa.value({j}), pb.value({j})) << i;
  }
  NamedTensors partial = a->state_dict();
  partial.pop_back();
  partial.emplace_back("extra.weight", Tensor::zeros({1}));
  try {
    b->load_state_dict(partial);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys: [2.bias]; unexpected keys: [extra.weight]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(b->load_state_dict(partial, /*strict=*/false));
  NamedTensors wrong = a->state_dict();
  wrong[0].second = Tensor::zeros({3, 3});
  EXPECT_THROW(b->load_state_dict(wrong), Error);
}

TEST(Module, ToHalvesParameterBytesAndKeepsGradFlag) {
  Generator gen(3);
  auto net = mlp(gen);
  std::size_t before = 0, after = 0;
  for (const Tensor& p : net->parameters()) before += p.nbytes();
  net->to(DType::BF16);
  for (const Tensor& p : net->parameters()) {
    after += p.nbytes();
    EXPECT_EQ(p.dtype(), DType::BF16);
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_EQ(after * 2, before);
  const Tensor y = net->forward(Tensor::ones({2, 4}, DType::BF16));
  EXPECT_EQ(y.dtype(), DType::BF16);
}

TEST(Training, MlpLearnsARegressionInF32WithSgd) {
  // y = sin(x0) + x1 * x2 - x3 on [-1, 1]^4: an MLP gets the MSE well below the target's variance.
  Generator gen(7);
  auto net = mlp(gen);
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = Tensor::uniform({256, 4}, -1, 1, gen);
  Tensor y = Tensor::empty({256, 1});
  for (int64_t i = 0; i < 256; ++i)
    y.set({i, 0}, std::sin(x.value({i, 0})) + x.value({i, 1}) * x.value({i, 2}) - x.value({i, 3}));
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    const Tensor diff = net->forward(x) - y;
    const Tensor loss = mean(diff * diff);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 0.3);
  EXPECT_LT(last, 0.02) << "from " << first;
}

}  // namespace
}  // namespace mixprec::nn

#include "mixprec/core/allocator.h"
#include "mixprec/nn/checkpoint.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"

namespace mixprec::nn {
namespace {

TEST(Layers, ShapesAndHalfPrecisionKeepsNormsF32) {
  Generator gen(11);
  auto net = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{
      std::make_shared<Conv2d>(3, 16, 3, Conv2dParams{1, 1, 1, 1}, true, gen),
      std::make_shared<GroupNorm>(4, 16, 1e-5, kernels::Activation::SiLU),
      std::make_shared<Conv2d>(16, 16, 3, Conv2dParams{2, 1, 1, 16}, true,
                               gen),  // depthwise, stride 2
      std::make_shared<Upsample>(2, kernels::UpsampleMode::Nearest)});
  const Tensor x = Tensor::randn({2, 3, 8, 8}, gen).to(MemoryFormat::ChannelsLast);
  const Tensor y = net->forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 16, 8, 8}));
  EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast)) << "channels_last flows through";
  net->to(DType::BF16);
  for (const auto& [name, p] : net->named_parameters())
    EXPECT_EQ(p.dtype(), name.rfind("1.", 0) == 0 ? DType::F32 : DType::BF16) << name;
  EXPECT_EQ(net->forward(x.to(DType::BF16)).dtype(), DType::BF16);

  MultiheadAttention mha(32, 4, gen);
  const Tensor seq = Tensor::randn({2, 10, 32}, gen);
  EXPECT_EQ(mha.forward(seq, true).shape(), (Shape{2, 10, 32}));
  EXPECT_EQ(mha.named_parameters().size(), 8u);
  Embedding emb(100, 8, gen);
  EXPECT_EQ(emb.forward(Tensor::from_vector<int64_t>({1, 5, 99}, {1, 3})).shape(),
            (Shape{1, 3, 8}));
}

TEST(Layers, DropoutOnlyWhileTraining) {
  Generator gen(12);
  Dropout drop(0.5, gen);
  const Tensor x = Tensor::ones({1000});
  const Tensor y = drop.forward(x);
  double zeros = 0;
  for (int64_t i = 0; i < 1000; ++i) zeros += y.value({i}) == 0.0;
  EXPECT_NEAR(zeros / 1000, 0.5, 0.06);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).shares_storage(x));
}

// A block with randomness (dropout) and parameters, for the checkpoint tests.
struct Block {
  Linear a, b;
  Generator& gen;
  explicit Block(Generator& g, int64_t width)
      : a(width, 4 * width, true, g), b(4 * width, width, true, g), gen(g) {}
  Tensor operator()(const Tensor& x) {
    return add(x, b.forward(dropout(gelu(a.forward(x)), 0.2, true, gen)));
  }
};

TEST(Checkpoint, RecomputesBitIdenticallyWithTheSameRandomNumbers) {
  Generator init(13);
  Block block(init, 16);
  Generator data(14);
  const Tensor x = Tensor::randn({8, 16}, data);
  std::vector<Tensor> plain_grads, ckpt_grads;
  for (bool use_checkpoint : {false, true}) {
    block.gen.manual_seed(99);
    for (const Tensor& p : block.a.parameters()) p.zero_grad();
    for (const Tensor& p : block.b.parameters()) p.zero_grad();
    const Tensor xi = x.clone();
    xi.requires_grad_();
    const Tensor y = use_checkpoint
                         ? checkpoint([&](const std::vector<Tensor>& in) { return block(in[0]); },
                                      {xi}, block.gen)
                         : block(xi);
    sum(mul(y, y)).backward();
    auto& out = use_checkpoint ? ckpt_grads : plain_grads;
    out.push_back(xi.grad());
    for (const Tensor& p : block.a.parameters()) out.push_back(p.grad());
    for (const Tensor& p : block.b.parameters()) out.push_back(p.grad());
  }
  ASSERT_EQ(plain_grads.size(), ckpt_grads.size());
  for (std::size_t i = 0; i < plain_grads.size(); ++i) {
    const Tensor a = plain_grads[i].flatten(), b = ckpt_grads[i].flatten();
    for (int64_t j = 0; j < a.numel(); ++j)
      ASSERT_EQ(a.value({j}), b.value({j})) << "gradient " << i << " element " << j;
  }
}

TEST(Checkpoint, LowersPeakMemory) {
  Generator init(15);
  std::vector<std::unique_ptr<Block>> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(std::make_unique<Block>(init, 64));
  const Tensor x = Tensor::randn({512, 64}, init);
  CachingAllocator& alloc = CachingAllocator::global();
  std::size_t peaks[2];
  for (bool use_checkpoint : {false, true}) {
    alloc.reset_peak();
    const std::size_t base = alloc.stats().allocated_bytes;
    Tensor h = x.clone();
    h.requires_grad_();
    Tensor y = h;
    for (auto& blk : blocks)
      y = use_checkpoint ? checkpoint([&](const std::vector<Tensor>& in) { return (*blk)(in[0]); },
                                      {y}, blk->gen)
                         : (*blk)(y);
    sum(y).backward();
    peaks[use_checkpoint] = alloc.stats().peak_allocated_bytes - base;
  }
  EXPECT_LT(peaks[1] * 2, peaks[0]) << "checkpointed " << peaks[1] << " bytes vs " << peaks[0];
}

}  // namespace
}  // namespace mixprec::nn

namespace mixprec::nn {
namespace {

TEST(Training, SmallCnnLearnsToClassifyStripesInF32) {
  // 8x8 single-channel images of horizontal (class 0) or vertical (class 1) stripes at random
  // phase, plus noise; conv -> relu -> pool -> linear classifies them.
  Generator gen(21);
  const int64_t n = 64;
  Tensor images = Tensor::empty({n, 1, 8, 8});
  std::vector<int64_t> labels(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 2;
    const int64_t phase = (i / 2) % 4;
    for (int64_t y = 0; y < 8; ++y)
      for (int64_t x = 0; x < 8; ++x) {
        const int64_t along = i % 2 == 0 ? y : x;
        images.set({i, 0, y, x}, ((along + phase) % 4 < 2 ? 1.0 : -1.0) + 0.3 * gen.normal());
      }
  }
  const Tensor targets = Tensor::from_vector<int64_t>(labels);
  Conv2d conv(1, 8, 3, {1, 1, 1, 1}, true, gen);
  Linear head(8 * 4 * 4, 2, true, gen);
  std::vector<Tensor> params = conv.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    const Tensor h = max_pool2d(relu(conv.forward(images)), 2);  // [n, 8, 4, 4]
    const Tensor loss = cross_entropy(head.forward(h.reshape({n, -1})), targets);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, 0.05) << "from " << first;
}

}  // namespace
}  // namespace mixprec::nn

#include "mixprec/nn/init.h"

namespace mixprec::nn {
namespace {

TEST(Init, FansBoundsAndDeterminism) {
  const Tensor w = Tensor::empty({64, 32, 3, 3});
  EXPECT_EQ(init::fan_in(w), 32 * 9);
  EXPECT_EQ(init::fan_out(w), 64 * 9);
  Generator a(5), b(5);
  init::kaiming_uniform_(w, a);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / (32 * 9));
  double lo = 0, hi = 0, sq = 0;
  const Tensor flat = w.flatten();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double v = flat.value({i});
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sq += v * v;
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_NEAR(sq / flat.numel(), bound * bound / 3, 0.05 * bound * bound / 3);  // var of U(-b, b)
  const Tensor again = Tensor::empty({64, 32, 3, 3});
  init::kaiming_uniform_(again, b);
  EXPECT_EQ(again.value({3, 4, 1, 2}), w.value({3, 4, 1, 2})) << "same seed, same values";
  init::xavier_normal_(again, b);
  init::zeros_(again);
  EXPECT_EQ(again.value({0, 0, 0, 0}), 0.0);
}

TEST(Module, ToChannelsLastLaysOutConvWeights) {
  Generator gen(6);
  Conv2d conv(8, 16, 3, {1, 1, 1, 1}, true, gen);
  conv.to(MemoryFormat::ChannelsLast);
  EXPECT_TRUE(conv.weight().is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(conv.weight().requires_grad());
  const Tensor y = conv.forward(Tensor::randn({1, 8, 5, 5}, gen).to(MemoryFormat::ChannelsLast));
  EXPECT_EQ(y.shape(), (Shape{1, 16, 5, 5}));
}

// ---- Conv2d's inference packing ----

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(),
                     static_cast<std::size_t>(ca.numel()) * ca.element_size()) == 0;
}

// conv's forward against the op on its current weights, which packs per call.
void expect_matches_uncached(Conv2d& conv, const Tensor& x, const Conv2dParams& p) {
  const Tensor cached = conv.forward(x);
  EXPECT_GT(conv.packed_bytes(), 0u);
  EXPECT_TRUE(same_bits(cached, conv2d(x, conv.weight(), conv.bias(), p)));
  EXPECT_TRUE(same_bits(conv.forward(x), cached));  // served from the packing
  // With a residual in the epilogue, channels_last or NCHW, and with one frame's channel offsets.
  Generator gen(3);
  for (MemoryFormat format : {MemoryFormat::ChannelsLast, MemoryFormat::Contiguous}) {
    const Tensor r = Tensor::randn(cached.shape(), gen).to(cached.dtype()).contiguous(format);
    EXPECT_TRUE(same_bits(conv.forward(x, r), conv2d(x, conv.weight(), conv.bias(), p, r)));
  }
  const Tensor one = x.slice(0, 0, 1);
  const Tensor offsets = Tensor::randn({1, cached.size(1), 1, 1}, gen).to(cached.dtype());
  EXPECT_TRUE(same_bits(conv.forward(one, offsets),
                        conv2d(one, conv.weight(), conv.bias(), p, offsets)));
}

TEST(Conv2dPacking, BitIdenticalToPackingPerCall) {
  struct Case {
    int64_t c, o, k;
    Conv2dParams p;
    DType w, x;
    bool autocast;
  };
  const Case cases[] = {
      {64, 64, 3, {.padding = 1}, DType::BF16, DType::BF16, false},  // AMX where available
      {32, 48, 3, {.padding = 1}, DType::BF16, DType::BF16, false},
      {8, 16, 3, {.stride = 2, .padding = 1}, DType::F32, DType::F32, false},
      {8, 12, 3, {.padding = 1, .groups = 2}, DType::F32, DType::BF16, false},
      {16, 16, 3, {.padding = 1, .groups = 16}, DType::BF16, DType::BF16, false},  // depthwise
      {64, 32, 1, {}, DType::F16, DType::F16, false},
      {64, 64, 3, {.padding = 1}, DType::F32, DType::F32, true},  // autocast casts both
  };
  Generator gen(11);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.c << "->" << c.o << " k" << c.k << " " << dtype_name(c.w)
                                    << " x " << dtype_name(c.x));
    Conv2d conv(c.c, c.o, c.k, c.p, true, gen);
    conv.to(c.w);
    conv.to(MemoryFormat::ChannelsLast);
    const Tensor x =
        Tensor::randn({2, c.c, 9, 9}, gen).to(c.x).contiguous(MemoryFormat::ChannelsLast);
    InferenceMode inference;
    amp::Autocast on(DType::BF16, c.autocast);
    expect_matches_uncached(conv, x, c.p);
  }
}

TEST(Conv2dPacking, RemadeAfterWritesReplacementsAndOptimizerSteps) {
  Generator gen(12);
  const Conv2dParams p{.padding = 1};
  Conv2d conv(32, 32, 3, p, true, gen);
  const Tensor x = Tensor::randn({1, 32, 8, 8}, gen);
  {
    NoGrad no_grad;
    const Tensor before = conv.forward(x);
    conv.weight().copy_(Tensor::randn(conv.weight().shape(), gen));
    EXPECT_FALSE(same_bits(conv.forward(x), before));
    expect_matches_uncached(conv, x, p);
    conv.weight().fill_(0.25);
    expect_matches_uncached(conv, x, p);
  }
  optim::SGD opt(conv.parameters(), {.lr = 0.1});
  sum(conv.forward(x)).backward();
  opt.step();
  {
    NoGrad no_grad;
    expect_matches_uncached(conv, x, p);
  }
  conv.to(DType::BF16);  // replaces the weight tensor
  conv.to(MemoryFormat::ChannelsLast);
  NoGrad no_grad;
  expect_matches_uncached(conv, x.to(DType::BF16), p);
  expect_matches_uncached(conv, x, p);  // f32 input: packed for f32 now
}

TEST(Conv2dPacking, NotKeptWhenGradientsAreNeeded) {
  Generator gen(13);
  Conv2d conv(16, 16, 3, {.padding = 1}, true, gen);
  const Tensor x = Tensor::randn({1, 16, 6, 6}, gen);
  {
    NoGrad no_grad;
    conv.forward(x);
  }
  ASSERT_GT(conv.packed_bytes(), 0u);
  const Tensor y = conv.forward(x);  // weights require grad: the per-call path, packing dropped
  EXPECT_EQ(conv.packed_bytes(), 0u);
  EXPECT_TRUE(y.requires_grad());
  for (const Tensor& t : conv.parameters()) t.requires_grad_(false);
  const Tensor xg = x.clone();
  xg.requires_grad_();
  EXPECT_TRUE(conv.forward(xg).requires_grad());  // x needs its gradient
  EXPECT_EQ(conv.packed_bytes(), 0u);
  EXPECT_FALSE(conv.forward(x).requires_grad());  // frozen weights, plain x: packed
  EXPECT_GT(conv.packed_bytes(), 0u);
  Tensor unpacked;
  {
    DispatchConfig off = dispatch_config();
    off.pack_inference_weights = false;
    ScopedDispatch scope(off);
    unpacked = conv.forward(x);  // switched off: dropped, the per-call path
  }
  EXPECT_EQ(conv.packed_bytes(), 0u);
  EXPECT_TRUE(same_bits(unpacked, conv.forward(x)));
}

TEST(Conv2dPacking, HoldsOnePackingWhateverTheCalls) {
  // On one thread: a worker allocates its thread-local scratch the first time it runs a
  // chunk, and chunks are claimed at run time, so with more threads a later round may be a
  // worker's first. Alone, every byte that stays is the packing's.
  struct OneThread {
    int before = num_threads();
    OneThread() { set_num_threads(1); }
    ~OneThread() { set_num_threads(before); }
  } one_thread;
  Generator gen(14);
  Conv2d conv(64, 64, 3, {.padding = 1}, true, gen);
  const Tensor x = Tensor::randn({1, 64, 8, 8}, gen);
  const Tensor xb = x.to(DType::BF16);
  InferenceMode inference;
  conv.forward(x);
  const std::size_t f32_bytes = conv.packed_bytes();
  auto round = [&] {
    conv.forward(xb);
    conv.forward(x);
    conv.weight().copy_(conv.weight());
  };
  round();
  const std::size_t allocated = CachingAllocator::global().stats().allocated_bytes;
  for (int i = 0; i < 10; ++i) round();
  EXPECT_EQ(CachingAllocator::global().stats().allocated_bytes, allocated);
  EXPECT_LE(conv.packed_bytes(), f32_bytes);
}

// Linear packs the same way (the GEMM's packed B).
TEST(LinearPacking, BitIdenticalRemadeAndDroppedWithGradients) {
  Generator gen(15);
  Linear lin(96, 40, true, gen);
  const Tensor x = Tensor::randn({3, 5, 96}, gen);
  auto expect_uncached = [&](const Tensor& in) {
    const Tensor cached = lin.forward(in);
    EXPECT_GT(lin.packed_bytes(), 0u);
    EXPECT_TRUE(same_bits(cached, linear(in, lin.weight(), lin.bias())));
    EXPECT_TRUE(same_bits(lin.forward(in), cached));
  };
  {
    NoGrad no_grad;
    expect_uncached(x);
    expect_uncached(x.to(DType::BF16));  // bf16 x, f32 weight: f32 compute
    {
      amp::Autocast on(DType::BF16);
      expect_uncached(x);
    }
    lin.weight().copy_(Tensor::randn(lin.weight().shape(), gen));
    expect_uncached(x);
    lin.to(DType::BF16);
    expect_uncached(x.to(DType::BF16));
  }
  EXPECT_TRUE(lin.forward(x.to(DType::BF16)).requires_grad());
  EXPECT_EQ(lin.packed_bytes(), 0u);
}

}  // namespace
}  // namespace mixprec::nn
