// Graph capture and replay: bit-identical to eager, no allocation per replay, a memory plan that
// shares space, dead code dropped, and every kind of work a replay cannot repeat refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/graph/graph.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/layers.h"
#include "mixprec/optim/adam.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/linalg.h"
#include "mixprec/ops/reduce.h"
#include "support/bit_equal.h"
#include "support/error_of.h"

namespace mixprec::graph {
namespace {

using test_support::error_of;

using test_support::bit_equal;

// A small network of the ops a model uses: linear layers (packed for inference), a fused
// residual, an activation, a softmax, a reduction, a cast.
struct Mlp {
  Generator gen{7};
  nn::Linear fc1{64, 128, true, gen}, fc2{128, 64, true, gen};
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) {
    const Tensor h = gelu(fc1.forward(in[0]));
    const Tensor y = add(fc2.forward(h), in[0]);
    return {softmax(y, -1), mean(y, {1}).to(DType::F32)};
  }
};

TEST(Graph, ReplayIsBitIdenticalToEagerInEveryDtype) {
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Mlp mlp;
    mlp.fc1.to(dtype);
    mlp.fc2.to(dtype);
    Generator gen(3);
    const Tensor x = Tensor::randn({8, 64}, gen, dtype);
    CaptureOptions planning_only;  // no pass that changes a rounding
    planning_only.fuse_epilogues = false;
    Graph g = capture(std::ref(mlp), {x}, planning_only);
    for (int round = 0; round < 3; ++round) {
      const Tensor x2 = Tensor::randn({8, 64}, gen, dtype);
      std::vector<Tensor> eager;
      {
        InferenceMode inference;
        eager = mlp({x2});
      }
      const std::vector<Tensor>& replayed = g.run({x2});
      ASSERT_EQ(replayed.size(), 2u);
      for (std::size_t i = 0; i < 2; ++i)
        EXPECT_TRUE(bit_equal(eager[i], replayed[i])) << dtype_name(dtype) << " output " << i;
    }
  }
}

// A DDIM-like update: scalar ops, a product of two activations, a sigmoid and a clamp, all of
// one shape, then a kernel that is not elementwise (a reduction) and a broadcast add (not the
// chain's shape): the first six kernels form one chain run chunk by chunk.
std::vector<Tensor> elementwise_chain(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  const Tensor& eps = in[1];
  const Tensor a = mul(x, 1.25);
  const Tensor b = add(a, mul(eps, -0.5));
  const Tensor c = sigmoid(b) * x;
  const Tensor y = clamp(add(c, 0.1), -2.0, 2.0);
  const Tensor row_mean = mean(y, {-1}, true);
  return {y, add(y, row_mean)};
}

// Bit-identical to eager and to the unfused replay in every dtype, over chunk boundaries (a size
// that is not a multiple of the chunk), contiguous and channels_last, and allocation-free.
TEST(Graph, ElementwiseChainsRunChunkByChunkBitIdentically) {
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (channels_last ? " channels_last" : ""));
      Generator gen(11);
      auto make = [&] {
        Tensor t = Tensor::randn({2, 16, 67, 71}, gen, dtype);
        return channels_last ? t.contiguous(MemoryFormat::ChannelsLast) : t;
      };
      const Tensor x = make(), eps = make();
      Graph fused = capture(elementwise_chain, {x, eps});
      CaptureOptions unfused_options;
      unfused_options.fuse_elementwise = false;
      Graph unfused = capture(elementwise_chain, {x, eps}, unfused_options);
      EXPECT_EQ(fused.fused_chains(), 1u);
      EXPECT_EQ(fused.fused_kernels(), 7u);  // mul, mul, add, sigmoid, mul, add, clamp
      EXPECT_EQ(unfused.fused_chains(), 0u);
      EXPECT_NE(fused.to_string().find("[chain 0]"), std::string::npos);
      for (int round = 0; round < 2; ++round) {
        const Tensor x2 = make(), eps2 = make();
        std::vector<Tensor> eager;
        {
          InferenceMode inference;
          eager = elementwise_chain({x2, eps2});
        }
        const std::vector<Tensor> a = fused.run({x2, eps2});
        const std::vector<Tensor> b = unfused.run({x2, eps2});
        for (std::size_t i = 0; i < 2; ++i) {
          EXPECT_TRUE(bit_equal(eager[i], a[i])) << "output " << i << " fused vs eager";
          EXPECT_TRUE(bit_equal(b[i], a[i])) << "output " << i << " fused vs unfused";
        }
      }
      const MemoryStats before = CachingAllocator::global().stats();
      fused.run({x, eps});
      const MemoryStats middle = CachingAllocator::global().stats();
      unfused.run({x, eps});
      const MemoryStats after = CachingAllocator::global().stats();
      // Fusion allocates nothing of its own. (The row mean of a channels_last tensor stages a
      // contiguous copy inside the reduction kernel, with or without fusion.)
      EXPECT_EQ(middle.num_allocs - before.num_allocs, after.num_allocs - middle.num_allocs);
      if (!channels_last) {
        EXPECT_EQ(middle.num_allocs, before.num_allocs);
      }
    }
}

// A chain's kernels interleave chunk by chunk, so the buffers it touches must not share arena
// space with each other even where the kernels one after the other would let them: each
// intermediate lives across the whole chain (in-place sharing, which keeps positions, stays).
TEST(Graph, ElementwiseChainBuffersDoNotOverlapInTheArena) {
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor t = in[0];
    for (int i = 0; i < 6; ++i) t = add(mul(t, 0.5), in[0]);  // each result dies at the next
    return std::vector<Tensor>{t};
  };
  Generator gen(12);
  const Tensor x = Tensor::randn({64, 1000}, gen);
  Graph g = capture(fn, {x});
  EXPECT_EQ(g.fused_chains(), 1u);
  const Tensor x2 = Tensor::randn({64, 1000}, gen);
  std::vector<Tensor> eager;
  {
    InferenceMode inference;
    eager = fn({x2});
  }
  EXPECT_TRUE(bit_equal(eager[0], g.run({x2})[0]));
}

// index_copy_ writes slices at the indices a tensor holds when it runs: a replay that is given
// another index writes elsewhere (a KV cache at the position of the step).
TEST(IndexCopy, WritesTheSlicesTheIndexHoldsWhenItRuns) {
  Tensor cache = Tensor::zeros({2, 3, 5}, DType::BF16);
  const Tensor rows = Tensor::arange(1.0, 13.0, 1.0, DType::F32).view({2, 3, 2}).to(DType::BF16);
  index_copy_(cache, 2, Tensor::from_vector(std::vector<int32_t>{4, 1}, Shape{2}), rows);
  EXPECT_TRUE(bit_equal(cache.narrow(2, 4, 1), rows.narrow(2, 0, 1)));
  EXPECT_TRUE(bit_equal(cache.narrow(2, 1, 1), rows.narrow(2, 1, 1)));
  EXPECT_TRUE(bit_equal(cache.narrow(2, 0, 1), Tensor::zeros({2, 3, 1}, DType::BF16)));
  EXPECT_NE(error_of([&] {
              index_copy_(cache, 2, Tensor::full({1}, 5, DType::I64), rows.narrow(2, 0, 1));
            }).find("index 5 is out of range for dim 2 of size 5"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              index_copy_(cache, 2, Tensor::full({1}, 0, DType::I64), rows);
            }).find("source is"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              index_copy_(cache, 2, Tensor::full({1}, 0.0, DType::F32), rows.narrow(2, 0, 1));
            }).find("index must be a 1-D i64 or i32"),
            std::string::npos);

  Tensor state = Tensor::zeros({4, 3}, DType::F32);  // made before the capture: a constant
  Tensor index = Tensor::zeros({1}, DType::I64);
  Graph g = capture(
      [&](const std::vector<Tensor>& in) {
        index_copy_(state, 0, in[0], mul(in[1], 2.0));
        return std::vector<Tensor>{sum(state)};
      },
      {index, Tensor::ones({1, 3})});
  for (int64_t row = 1; row < 4; ++row) {
    index.data<int64_t>()[0] = row;
    const float total = g.run({index, Tensor::full({1, 3}, double(row))})[0].item<float>();
    EXPECT_EQ(state.value({row, 2}), 2.0 * row);
    EXPECT_EQ(total, 6.0f * static_cast<float>(1 + row * (row + 1) / 2));  // row 0 from the capture
  }
}

TEST(Graph, ReplayAllocatesNothing) {
  Mlp mlp;
  Generator gen(4);
  const Tensor x = Tensor::randn({8, 64}, gen);
  Graph g = capture(std::ref(mlp), {x});
  g.run({x});  // the first run may still warm a thread's scratch
  const MemoryStats before = CachingAllocator::global().stats();
  for (int i = 0; i < 5; ++i) g.run({x});
  const MemoryStats after = CachingAllocator::global().stats();
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
}

// Which thread takes which chunk varies from run to run, and a thread grows its per-thread
// scratch (the GEMM's packing space here) the first time it meets a chunk. A capture whose own
// eager runs all ran on the caller must still leave every thread ready: after it, a replay on
// any one thread alone allocates nothing. (Session 10's CI failed on one such allocation.)
TEST(Graph, ReplayOnAnyThreadAllocatesNothing) {
  struct Threads {
    int before = num_threads();
    Threads() { set_num_threads(2); }
    ~Threads() { set_num_threads(before); }
  } two;
  auto product = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{matmul(in[0], in[1]), matmul(in[0].to(DType::BF16), in[1])};
  };
  Generator gen(12);
  const std::vector<Tensor> in{Tensor::randn({192, 256}, gen), Tensor::randn({256, 320}, gen)};
  std::optional<Graph> g;
  {
    ScopedSoleThread caller_only(0);
    g.emplace(capture(product, in));
  }
  for (int thread = 0; thread < 2; ++thread) {
    ScopedSoleThread sole(thread);
    const MemoryStats before = CachingAllocator::global().stats();
    const std::vector<Tensor>& out = g->run(in);
    EXPECT_EQ(CachingAllocator::global().stats().num_allocs, before.num_allocs)
        << "thread " << thread;
    EXPECT_TRUE(bit_equal(out[0], matmul(in[0], in[1])));
  }
}

TEST(Graph, WritingTheInputsInPlaceNeedsNoCopy) {
  Mlp mlp;
  Generator gen(5);
  Graph g = capture(std::ref(mlp), {Tensor::randn({8, 64}, gen)});
  const Tensor x = Tensor::randn({8, 64}, gen);
  g.inputs()[0].copy_(x);
  const Tensor first = g.run()[0].clone();
  EXPECT_TRUE(bit_equal(first, g.run({x})[0]));
}

// A chain of elementwise ops on 1 MiB tensors: at most two are alive at a time (a kernel's input
// and output), so a plan with reuse needs about two buffers where one without needs them all.
TEST(Graph, MemoryPlanSharesSpaceBetweenLifetimes) {
  auto chain = [](const std::vector<Tensor>& in) {
    Tensor t = in[0];
    for (int i = 0; i < 10; ++i) t = mul(add(t, 1.0), 0.5);
    return std::vector<Tensor>{t};
  };
  const Tensor x = Tensor::ones({512, 512});  // 1 MiB of f32
  Graph planned = capture(chain, {x});
  CaptureOptions separate;
  separate.reuse_memory = false;
  Graph unplanned = capture(chain, {x}, separate);
  const std::size_t mib = std::size_t{1} << 20;
  // The input copy and one buffer every elementwise kernel writes in place (the last is the
  // output); without reuse, the input and 20 intermediates.
  EXPECT_EQ(planned.memory().arena_bytes, 2 * mib);
  EXPECT_EQ(planned.memory().in_place, 19u);
  EXPECT_EQ(planned.memory().live_peak_bytes, 2 * mib);
  EXPECT_EQ(unplanned.memory().arena_bytes, 21 * mib);
  EXPECT_EQ(unplanned.memory().in_place, 0u);
  EXPECT_GE(planned.memory().eager_peak_bytes, 2 * mib);
  EXPECT_TRUE(bit_equal(planned.run({x})[0], unplanned.run({x})[0]));
}

// A U-Net decoder's pattern: a normalization of c and a small branch that reads c too. Run as
// written, the normalization's output and c are alive together; with the branch first, the
// normalization is c's last reader and writes its output over it. The results do not change.
TEST(Graph, ReorderingLetsANormalizationOverwriteItsInput) {
  auto decoder = [](const std::vector<Tensor>& in) {
    const Tensor c = exp(mul(in[0], 0.5));
    const Tensor normed = group_norm(c, 4, Tensor(), Tensor(), 1e-5, kernels::Activation::SiLU);
    const Tensor branch = sum(c, {2, 3});
    return std::vector<Tensor>{normed, branch};
  };
  const Tensor x = Tensor::randn({1, 64, 32, 32});  // 256 KiB of f32
  Graph reordered = capture(decoder, {x});
  CaptureOptions as_written;
  as_written.reorder = false;
  Graph in_order = capture(decoder, {x}, as_written);
  const std::size_t size = x.nbytes();
  // The input copy, then c with the normalization written over it (and the branch's 256 bytes);
  // as written, c and the normalization's output apart.
  EXPECT_LT(reordered.memory().arena_bytes, 2 * size + size / 4);
  EXPECT_EQ(reordered.memory().in_place, 2u);  // exp over mul, the normalization over exp
  EXPECT_GE(in_order.memory().arena_bytes, 3 * size);
  EXPECT_EQ(reordered.ops(), (std::vector<std::string>{"mul", "exp", "sum", "group_norm_silu"}));
  const std::vector<Tensor> eager = decoder({x});
  for (Graph* g : {&reordered, &in_order}) {
    const std::vector<Tensor>& got = g->run({x});
    EXPECT_TRUE(bit_equal(got[0], eager[0]));
    EXPECT_TRUE(bit_equal(got[1], eager[1]));
  }
}

// The planner against the lifetimes: skip connections keep buffers alive across others, so
// the arena can be no smaller than the most bytes alive at once, and here it needs no more.
TEST(Graph, MemoryPlanMeetsTheLivePeakOnASkipNetwork) {
  auto unet_like = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> skips;
    Tensor h = in[0];
    for (int i = 0; i < 4; ++i) {
      h = exp(mul(h, 0.5));
      skips.push_back(h);
      h = cat({h, h}, 0);
    }
    for (int i = 3; i >= 0; --i)
      h = add(h.narrow(0, 0, skips[static_cast<std::size_t>(i)].size(0)),
              skips[static_cast<std::size_t>(i)]);
    return std::vector<Tensor>{h};
  };
  const Tensor x = Tensor::randn({64, 256});
  Graph g = capture(unet_like, {x});
  EXPECT_GE(g.memory().arena_bytes, g.memory().live_peak_bytes);
  EXPECT_LE(g.memory().arena_bytes, g.memory().live_peak_bytes * 5 / 4);
  EXPECT_TRUE(bit_equal(g.run({x})[0], unet_like({x})[0]));
}

TEST(Graph, FoldingConstantsReplaysOnlyWhatDependsOnTheInputs) {
  Generator gen(8);
  const Tensor w = Tensor::randn({16, 16}, gen), b = Tensor::randn({16}, gen);
  auto fn = [&](const std::vector<Tensor>& in) {
    // scale depends on constants only (a parameter and a host value): it folds.
    const Tensor scale = exp(mul(add(b, 1.0), Tensor::full({16}, 0.5)));
    return std::vector<Tensor>{mul(matmul(in[0], w), scale)};
  };
  const Tensor x = Tensor::randn({4, 16}, gen);
  CaptureOptions fold;
  fold.fold_constants = true;
  Graph folded = capture(fn, {x}, fold);
  Graph plain = capture(fn, {x});
  EXPECT_EQ(plain.folded(), 0u);
  EXPECT_EQ(folded.folded(), 4u);  // the fill, add, mul and exp
  EXPECT_EQ(folded.ops(), (std::vector<std::string>{"gemm", "mul"}));
  const Tensor x2 = Tensor::randn({4, 16}, gen);
  EXPECT_TRUE(bit_equal(folded.run({x2})[0], plain.run({x2})[0]));
  // Frozen: a later change of the parameter reaches the plain graph only.
  b.fill_(0.0);
  EXPECT_TRUE(bit_equal(plain.run({x2})[0], fn({x2})[0]));
  EXPECT_FALSE(bit_equal(folded.run({x2})[0], fn({x2})[0]));
}

TEST(Graph, DeadCodeIsDropped) {
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor unused = exp(in[0]);
    (void)unused;
    return std::vector<Tensor>{relu(in[0])};
  };
  const Tensor x = Tensor::randn({4, 4});
  Graph g = capture(fn, {x});
  EXPECT_EQ(g.eliminated(), 1u);
  EXPECT_EQ(g.ops(), std::vector<std::string>{"relu"});
  CaptureOptions keep;
  keep.eliminate_dead_code = false;
  EXPECT_EQ(capture(fn, {x}, keep).size(), 2u);
}

TEST(Graph, ParametersAreReferencedNotCopied) {
  Generator gen(6);
  const Tensor w = Tensor::randn({16, 16}, gen);
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{matmul(in[0], w)}; };
  const Tensor x = Tensor::randn({4, 16}, gen);
  Graph g = capture(fn, {x});
  w.fill_(0.25);  // an optimizer step, say
  EXPECT_TRUE(bit_equal(g.run({x})[0], matmul(x, w)));
}

TEST(Graph, AnotherShapeIsAClearErrorAndCompiledFunctionCapturesAgain) {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{silu(in[0])}; };
  Graph g = capture(fn, {Tensor::randn({4, 8})});
  const std::string message = error_of([&] { g.run({Tensor::randn({4, 9})}); });
  EXPECT_NE(message.find("captured as f32[4, 8]"), std::string::npos) << message;
  EXPECT_NE(error_of([&] {
              g.run({Tensor::randn({4, 8}, DType::BF16)});
            }).find("bf16"),
            std::string::npos);

  CompiledFunction compiled(fn);
  const Tensor a = Tensor::randn({4, 8}), b = Tensor::randn({2, 3});
  EXPECT_TRUE(bit_equal(compiled({a})[0], silu(a)));
  EXPECT_TRUE(bit_equal(compiled({b})[0], silu(b)));
  EXPECT_TRUE(bit_equal(compiled({a})[0], silu(a)));
  EXPECT_EQ(compiled.captures(), 2u);
  // The layout is part of the signature too.
  compiled({a.t().contiguous().t()});
  EXPECT_EQ(compiled.captures(), 3u);
}

TEST(Graph, HostReadsOfComputedValuesAreRefused) {
  auto branches = [](const std::vector<Tensor>& in) {
    const Tensor s = sum(in[0]);
    return std::vector<Tensor>{s.item<float>() > 0 ? exp(in[0]) : neg(in[0])};
  };
  const std::string message = error_of([&] { capture(branches, {Tensor::randn({4})}); });
  EXPECT_NE(message.find("host code used the values"), std::string::npos) << message;
  // Reading an input on the host is the same mistake.
  auto reads_input = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mul(in[0], in[0].value({0}))};
  };
  EXPECT_NE(error_of([&] { capture(reads_input, {Tensor::randn({4})}); }).find("host code"),
            std::string::npos);
}

TEST(Graph, RandomDrawsAreRefused) {
  auto noisy = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(in[0], Tensor::randn({4}))};
  };
  const std::string message = error_of([&] { capture(noisy, {Tensor::randn({4})}); });
  EXPECT_NE(message.find("random"), std::string::npos) << message;
}

TEST(Graph, TensorsFilledBehindTheCapturesBackAreRefused) {
  auto by_hand = [](const std::vector<Tensor>& in) {
    Tensor t = Tensor::empty({4});
    for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(i);
    return std::vector<Tensor>{add(in[0], t)};
  };
  const std::string message = error_of([&] { capture(by_hand, {Tensor::randn({4})}); });
  EXPECT_NE(message.find("no recorded kernel wrote"), std::string::npos) << message;
  // Host values handed to a factory are constants, and fine.
  auto constant = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(in[0], Tensor::from_vector<float>({1, 2, 3, 4}))};
  };
  const Tensor x = Tensor::randn({4});
  EXPECT_TRUE(bit_equal(capture(constant, {x}).run({x})[0],
                        add(x, Tensor::from_vector<float>({1, 2, 3, 4}))));
}

// Ops on another thread are not recorded (the recorder is the capturing thread's), but the
// tensors they make are watched on every thread: reading one is refused, not baked in.
TEST(Graph, TensorsMadeOnAnotherThreadAreRefused) {
  auto threaded = [](const std::vector<Tensor>& in) {
    Tensor t;
    std::thread worker([&] { t = exp(in[0]); });
    worker.join();
    return std::vector<Tensor>{add(t, 1.0)};
  };
  const std::string message = error_of([&] { capture(threaded, {Tensor::randn({4})}); });
  EXPECT_NE(message.find("no recorded kernel wrote"), std::string::npos) << message;
}

TEST(Graph, WritingIntoAnInputIsRefused) {
  auto writes = [](const std::vector<Tensor>& in) {
    in[0].copy_(exp(in[0]));
    return std::vector<Tensor>{in[0]};
  };
  const std::string message = error_of([&] { capture(writes, {Tensor::randn({4})}); });
  EXPECT_NE(message.find("writes into an input"), std::string::npos) << message;
}

TEST(Graph, OptionalInputsStayUndefined) {
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[1].defined() ? add(in[0], in[1]) : neg(in[0])};
  };
  const Tensor x = Tensor::randn({3});
  Graph g = capture(fn, {x, Tensor()});
  EXPECT_TRUE(bit_equal(g.run({x, Tensor()})[0], neg(x)));
  EXPECT_FALSE(error_of([&] { g.run({x, x}); }).empty());
}

TEST(Graph, OutputsOutliveTheGraph) {
  Tensor kept;
  {
    auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; };
    Graph g = capture(fn, {Tensor::zeros({16})});
    kept = g.run({Tensor::zeros({16})})[0];
  }
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(kept.value({i}), 1.0);  // the arena is still alive
}

// A decoder step: a nearest upsample, a convolution, its concatenation with a skip, and a
// convolution of that. The first convolution reads the small tensor through the upsample and
// writes its channels of the concatenation itself, so neither the upsampled tensor nor its own
// output is made; the results stay bit-identical (bf16 on the vdpbf16ps or AMX path, f32).
TEST(Graph, ConvolutionsReadUpsamplesAndWriteConcatenationsInPlace) {
  for (const DType dtype : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    Generator gen(9);
    nn::Conv2d up_conv(32, 32, 3, {1, 1}, true, gen), out_conv(48, 16, 3, {1, 1}, true, gen);
    up_conv.to(dtype);
    out_conv.to(dtype);
    auto decoder = [&](const std::vector<Tensor>& in) {
      const Tensor h = up_conv.forward(upsample(exp(in[0]), 2, kernels::UpsampleMode::Nearest));
      return std::vector<Tensor>{out_conv.forward(cat({h, exp(in[1])}, 1))};
    };
    const std::vector<Tensor> in{
        Tensor::randn({1, 32, 16, 16}, gen, dtype).to(MemoryFormat::ChannelsLast),
        Tensor::randn({1, 16, 32, 32}, gen, dtype).to(MemoryFormat::ChannelsLast)};
    Graph fused = capture(decoder, in);
    CaptureOptions apart;
    apart.fuse_convolutions = false;
    Graph unfused = capture(decoder, in, apart);
    EXPECT_EQ(fused.fused_upsamples(), 1u);
    EXPECT_EQ(fused.elided_copies(), 1u);  // the skip's copy stays: exp's output is read once,
                                           // but exp does not write channel slices
    EXPECT_EQ(fused.ops(), (std::vector<std::string>{"exp", "upsample+conv2d_packed", "exp", "copy",
                                                     "conv2d_packed"}));
    EXPECT_EQ(unfused.size(), fused.size() + 2);
    // Gone from the arena: the upsampled tensor (32 x 32 x 32) and the convolution's output.
    const std::size_t upsampled = 32 * 32 * 32 * dtype_size(dtype);
    EXPECT_LE(fused.memory().live_peak_bytes + upsampled, unfused.memory().live_peak_bytes);
    const std::vector<Tensor> eager = decoder(in);
    EXPECT_TRUE(bit_equal(fused.run(in)[0], eager[0]));
    EXPECT_TRUE(bit_equal(unfused.run(in)[0], eager[0]));
    const MemoryStats before = CachingAllocator::global().stats();
    fused.run(in);
    EXPECT_EQ(CachingAllocator::global().stats().num_allocs, before.num_allocs);
  }
}

// Neither fusion applies where another kernel needs the tensor it would take away: an
// upsampled tensor read twice, a convolution output read beside its copy.
TEST(Graph, FusionsKeepTensorsOthersRead) {
  Generator gen(10);
  nn::Conv2d conv(8, 8, 3, {1, 1}, true, gen);
  auto shared = [&](const std::vector<Tensor>& in) {
    const Tensor up = upsample(in[0], 2, kernels::UpsampleMode::Nearest);
    const Tensor h = conv.forward(up);
    return std::vector<Tensor>{cat({h, up}, 1), sum(h, {1})};
  };
  const std::vector<Tensor> in{Tensor::randn({1, 8, 6, 6}, gen).to(MemoryFormat::ChannelsLast)};
  Graph g = capture(shared, in);
  EXPECT_EQ(g.fused_upsamples(), 0u);
  EXPECT_EQ(g.elided_copies(), 0u);
  const std::vector<Tensor> eager = shared(in);
  const std::vector<Tensor>& got = g.run(in);
  EXPECT_TRUE(bit_equal(got[0], eager[0]));
  EXPECT_TRUE(bit_equal(got[1], eager[1]));
}

TEST(Graph, DumpsNameEveryKernelAndWhereItsMemoryLives) {
  Mlp mlp;
  Graph g = capture(std::ref(mlp), {Tensor::randn({8, 64})});
  const std::string text = g.to_string();
  EXPECT_NE(text.find("linear_packed"), std::string::npos) << text;
  EXPECT_NE(text.find("@arena+"), std::string::npos) << text;
  EXPECT_NE(text.find("@input 0"), std::string::npos) << text;
  EXPECT_NE(text.find("eager peak"), std::string::npos) << text;
  // With each kernel's time (bench video --graph-dump): one per kernel line.
  const std::vector<double> ms = g.kernel_times(2);
  ASSERT_EQ(ms.size(), g.size());
  const std::string timed = g.to_string(ms);
  std::size_t lines = 0;
  for (std::size_t at = timed.find(" ms\n"); at != std::string::npos; at = timed.find(" ms\n", at + 1))
    ++lines;
  EXPECT_EQ(lines, g.size()) << timed;
  const std::string dot = g.to_dot();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("softmax"), std::string::npos);
}

TEST(Graph, AnotherDispatchLevelIsAClearError) {
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; };
  Graph g = capture(fn, {Tensor::zeros({4})});
  DispatchConfig scalar = dispatch_config();
  if (scalar.level == IsaLevel::Scalar) GTEST_SKIP() << "already at the scalar level";
  scalar.level = IsaLevel::Scalar;
  ScopedDispatch forced(scalar);
  EXPECT_NE(error_of([&] { g.run({Tensor::zeros({4})}); }).find("dispatch"), std::string::npos);
}

// A residual block written with plain ops (GroupNorm, then SiLU; a convolution, then add) and
// the same block written with the fused ops a hand-tuned model calls. With fuse_epilogues the
// plain block's replay runs the fused kernels: it is the fused block's eager output bit for bit
// (and, rounding once where eager rounds twice, close to its own eager output). Without it, it
// is its own eager output bit for bit.
TEST(Graph, EpiloguesFoldIntoTheKernelsAHandFusedModelCalls) {
  Generator gen(21);
  nn::Conv2d conv1{32, 32, 3, {.padding = 1}, true, gen}, conv2{32, 32, 3, {.padding = 1}, true, gen};
  nn::GroupNorm norm1{8, 32}, norm2{8, 32};
  for (nn::Module* m : std::initializer_list<nn::Module*>{&conv1, &conv2, &norm1, &norm2}) {
    m->to(DType::BF16);
    m->to(MemoryFormat::ChannelsLast);
  }
  auto plain = [&](const std::vector<Tensor>& in) {
    const Tensor h = conv1.forward(silu(norm1.forward(in[0])));
    return std::vector<Tensor>{add(conv2.forward(silu(norm2.forward(h))), in[0])};
  };
  auto fused = [&](const std::vector<Tensor>& in) {
    const Tensor h = conv1.forward(group_norm(in[0], 8, norm1.parameters()[0],
                                              norm1.parameters()[1], 1e-5,
                                              kernels::Activation::SiLU));
    const Tensor a = group_norm(h, 8, norm2.parameters()[0], norm2.parameters()[1], 1e-5,
                                kernels::Activation::SiLU);
    return std::vector<Tensor>{conv2.forward(a, in[0])};
  };
  const Tensor x = Tensor::randn({1, 32, 16, 16}, gen, DType::BF16)
                       .contiguous(MemoryFormat::ChannelsLast);
  Graph folded = capture(plain, {x});
  EXPECT_EQ(folded.fused_epilogues(), 3u);
  const std::vector<std::string> ops = folded.ops();
  EXPECT_NE(std::find(ops.begin(), ops.end(), "group_norm+silu"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "conv2d_packed+add"), ops.end());
  EXPECT_EQ(std::find(ops.begin(), ops.end(), "silu"), ops.end());
  CaptureOptions unfused_options;
  unfused_options.fuse_epilogues = false;
  Graph unfused = capture(plain, {x}, unfused_options);
  EXPECT_EQ(unfused.fused_epilogues(), 0u);
  EXPECT_EQ(unfused.size(), folded.size() + 3);
  for (int round = 0; round < 3; ++round) {
    const Tensor x2 = Tensor::randn({1, 32, 16, 16}, gen, DType::BF16)
                          .contiguous(MemoryFormat::ChannelsLast);
    std::vector<Tensor> eager_plain, eager_fused;
    {
      InferenceMode inference;
      eager_plain = plain({x2});
      eager_fused = fused({x2});
    }
    EXPECT_TRUE(bit_equal(folded.run({x2})[0], eager_fused[0])) << "round " << round;
    EXPECT_TRUE(bit_equal(unfused.run({x2})[0], eager_plain[0])) << "round " << round;
    EXPECT_FALSE(bit_equal(eager_plain[0], eager_fused[0]));  // two roundings, not one
    const Tensor a = eager_plain[0].to(DType::F64).contiguous(),
                 b = eager_fused[0].to(DType::F64).contiguous();
    double worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      worst = std::max(worst, std::abs(a.data<double>()[i] - b.data<double>()[i]));
    EXPECT_LT(worst, 0.1);
  }
}

// The recorded run holds no more memory than an eager run: the recorder keeps the values of
// constants and of what may fold into one, not every intermediate the function makes (a chain
// of 48 one-MiB intermediates peaked at 54 MiB while recorded, against 4 MiB eagerly). What the
// function computes from constants alone still folds into a constant.
TEST(Graph, TheRecordedRunHoldsNoMoreMemoryThanEager) {
  Generator gen(41);
  const Tensor w = Tensor::randn({256, 1024}, gen);
  auto chain = [&](const std::vector<Tensor>& in) {
    const Tensor half_w = mul(w, 0.5);  // folds into a constant
    Tensor h = in[0];
    for (int i = 0; i < 24; ++i) h = tanh(add(h, half_w));
    return std::vector<Tensor>{h};
  };
  const Tensor x = Tensor::randn({256, 1024}, gen);
  CachingAllocator& allocator = CachingAllocator::global();
  const std::size_t before = allocator.stats().allocated_bytes;
  CaptureOptions options;
  options.fold_constants = true;
  Graph g = capture(chain, {x}, options);
  const std::size_t growth = allocator.stats().peak_allocated_bytes - before;
  const MemoryPlan& m = g.memory();
  EXPECT_LE(growth, m.eager_peak_bytes + m.arena_bytes + m.constant_bytes + (std::size_t{2} << 20))
      << "eager peak " << m.eager_peak_bytes << ", arena " << m.arena_bytes;
  EXPECT_EQ(g.folded(), 1u);
  std::vector<Tensor> eager;
  {
    InferenceMode inference;
    eager = chain({x});
  }
  EXPECT_TRUE(bit_equal(g.run({x})[0], eager[0]));
}

// A cast of a convolution's, a GroupNorm's or a linear layer's output folds into the kernel,
// which then writes the cast's dtype itself. Widening, the f32 result is the one eager rounded:
// rounded to bf16 it is eager's bf16 result bit for bit, and it is not that result widened
// (which lost the low bits). Narrowing, the f32 result rounds once either way: eager's bits.
// A producer takes an activation and a cast, one per sweep.
TEST(Graph, CastsFoldIntoTheKernelThatMakesTheirInput) {
  Generator gen(23);
  nn::Conv2d conv{16, 16, 3, {.padding = 1}, true, gen};
  nn::GroupNorm norm{4, 16};
  nn::Linear wide{16, 32, true, gen}, narrow{16, 32, true, gen};
  for (nn::Module* m : std::initializer_list<nn::Module*>{&conv, &norm, &wide}) {
    m->to(DType::BF16);
    m->to(MemoryFormat::ChannelsLast);
  }
  // Outputs: the casts, then the uncast results eager computes (to compare against).
  auto model = [&](const std::vector<Tensor>& in, bool with_casts) {
    const Tensor c = conv.forward(in[0]);
    const Tensor g = norm.forward(in[0]);
    const Tensor l = relu(wide.forward(in[1]));
    const Tensor n = narrow.forward(in[2]);
    if (!with_casts) return std::vector<Tensor>{c, g, l, n};
    return std::vector<Tensor>{c.to(DType::F32), g.to(DType::F32), l.to(DType::F32),
                               n.to(DType::BF16)};
  };
  auto cast_model = [&](const std::vector<Tensor>& in) { return model(in, true); };
  auto inputs = [&] {
    return std::vector<Tensor>{
        Tensor::randn({1, 16, 8, 8}, gen, DType::BF16).contiguous(MemoryFormat::ChannelsLast),
        Tensor::randn({6, 16}, gen, DType::BF16), Tensor::randn({6, 16}, gen)};
  };
  Graph folded = capture(cast_model, inputs());
  EXPECT_EQ(folded.fused_epilogues(), 5u);  // four casts and the ReLU
  const std::vector<std::string> ops = folded.ops();
  for (const char* op : {"conv2d_packed+to_f32", "group_norm+to_f32", "linear_packed+relu+to_f32",
                         "linear_packed+to_bf16"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op << "\n" << folded.to_string();
  EXPECT_EQ(std::find(ops.begin(), ops.end(), "copy"), ops.end()) << folded.to_string();
  CaptureOptions unfused_options;
  unfused_options.fuse_epilogues = false;
  Graph unfused = capture(cast_model, inputs(), unfused_options);
  EXPECT_EQ(unfused.size(), folded.size() + 5);
  for (int round = 0; round < 2; ++round) {
    const std::vector<Tensor> in = inputs();
    std::vector<Tensor> eager, uncast;
    {
      InferenceMode inference;
      eager = model(in, true);
      uncast = model(in, false);
    }
    const std::vector<Tensor> got = folded.run(in);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].dtype(), DType::F32);
      EXPECT_TRUE(bit_equal(got[i].to(DType::BF16), uncast[i])) << "output " << i;
      EXPECT_FALSE(bit_equal(got[i], eager[i])) << "output " << i;  // the low bits are kept
    }
    EXPECT_TRUE(bit_equal(got[3], eager[3]));
    const std::vector<Tensor>& plain = unfused.run(in);
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(bit_equal(plain[i], eager[i]));
  }
}

// Several finishers fold into one producer in the epilogue's order (activation, residual, one
// rounding): a linear layer, a ReLU and an add become one kernel, and so do a bf16 convolution,
// the cast of its output to f32 and an f32 add (an autocast residual block's tail). An add
// before a ReLU does not fold both (the epilogue would apply them the other way round). Each
// result is within a couple of bf16 roundings of eager's (values of order 1).
TEST(Graph, EpiloguesChainInTheKernelsOrder) {
  Generator gen(29);
  nn::Linear fc{32, 32, true, gen};
  nn::Conv2d conv{8, 8, 3, {.padding = 1}, true, gen};
  fc.to(DType::BF16);
  conv.to(DType::BF16);
  conv.to(MemoryFormat::ChannelsLast);
  auto model = [&](const std::vector<Tensor>& in) {
    const Tensor a = add(relu(fc.forward(in[0])), in[0]);
    const Tensor b = relu(add(fc.forward(in[0]), in[0]));
    const Tensor c = add(conv.forward(in[1].to(DType::BF16)).to(DType::F32), in[1]);
    return std::vector<Tensor>{a, b, c};
  };
  auto inputs = [&] {
    return std::vector<Tensor>{
        Tensor::randn({4, 32}, gen, DType::BF16),
        Tensor::randn({1, 8, 6, 6}, gen).contiguous(MemoryFormat::ChannelsLast)};
  };
  Graph g = capture(model, inputs());
  const std::vector<std::string> ops = g.ops();
  for (const char* op : {"linear_packed+relu+add", "linear_packed+add", "relu",
                         "conv2d_packed+to_f32+add"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op << "\n" << g.to_string();
  const std::vector<Tensor> in = inputs();
  std::vector<Tensor> eager;
  {
    InferenceMode inference;
    eager = model(in);
  }
  const std::vector<Tensor>& got = g.run(in);
  for (std::size_t i = 0; i < eager.size(); ++i) {
    const Tensor x = got[i].to(DType::F64).contiguous(), y = eager[i].to(DType::F64).contiguous();
    for (int64_t k = 0; k < x.numel(); ++k)
      ASSERT_LE(std::abs(x.data<double>()[k] - y.data<double>()[k]),
                (std::abs(y.data<double>()[k]) + 1.0) * 0x1p-7)
          << "output " << i << " element " << k;
  }
}

// A training step's forward and backward captured whole (CaptureOptions::autograd): the
// gradients a replay gives are the eager backward's bit for bit, also after AdamW steps changed
// the parameters in place between replays, and a replay allocates nothing.
TEST(Graph, TrainingStepForwardAndBackwardReplayBitIdentically) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    Generator gen(11);
    nn::Linear fc1{32, 64, true, gen}, fc2{64, 16, true, gen};
    fc1.to(dtype);
    fc2.to(dtype);
    std::vector<Tensor> params = fc1.parameters();
    for (const Tensor& p : fc2.parameters()) params.push_back(p);
    const LossFunction loss_of = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{
          mse_loss(fc2.forward(gelu(fc1.forward(in[0]))).to(DType::F32), in[1])};
    };
    const Function step = with_gradients(loss_of, params);
    Tensor x = Tensor::randn({8, 32}, gen, dtype), y = Tensor::randn({8, 16}, gen);
    CaptureOptions options;
    options.autograd = true;
    Graph g = capture(step, {x, y}, options);
    optim::AdamW adam(params, {.lr = 1e-2});
    for (int round = 0; round < 3; ++round) {
      x = Tensor::randn({8, 32}, gen, dtype), y = Tensor::randn({8, 16}, gen);
      const std::vector<Tensor> eager = step({x, y});
      const MemoryStats before = CachingAllocator::global().stats();
      const std::vector<Tensor>& replayed = g.run({x, y});
      if (round > 0) EXPECT_EQ(CachingAllocator::global().stats().num_allocs, before.num_allocs);
      ASSERT_EQ(replayed.size(), params.size() + 1);
      for (std::size_t i = 0; i < replayed.size(); ++i)
        EXPECT_TRUE(bit_equal(eager[i], replayed[i]))
            << dtype_name(dtype) << " round " << round << " output " << i;
      set_gradients(params, replayed);
      adam.step();  // the next replay must see the updated parameters
      adam.zero_grad();
    }
  }
}

// A convolutional training step (convolution, GroupNorm + SiLU, pooling, upsampling, a fused
// residual) captured whole: its gradients are eager's bit for bit across AdamW steps, in f32 and
// in bf16 channels_last.
TEST(Graph, ConvolutionalTrainingStepReplaysBitIdentically) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    Generator gen(13);
    nn::Conv2d conv1{4, 16, 3, {.padding = 1}, true, gen}, conv2{16, 16, 3, {.padding = 1}, true, gen},
        conv3{16, 4, 1, {}, true, gen};
    nn::GroupNorm norm{4, 16, 1e-5, kernels::Activation::SiLU};
    std::vector<Tensor> params;
    for (nn::Module* m : std::initializer_list<nn::Module*>{&conv1, &conv2, &conv3, &norm}) {
      m->to(dtype);
      m->to(MemoryFormat::ChannelsLast);
      for (const Tensor& p : m->parameters()) params.push_back(p);
    }
    const LossFunction loss_of = [&](const std::vector<Tensor>& in) {
      const Tensor h = norm.forward(conv1.forward(in[0]));
      const Tensor down = max_pool2d(h, 2), mean_down = avg_pool2d(h, 2);
      const Tensor up = upsample(conv2.forward(add(down, mean_down)), 2,
                                 kernels::UpsampleMode::Nearest);
      const Tensor y = conv3.forward(conv2.forward(up, h));
      return std::vector<Tensor>{mse_loss(y.to(DType::F32), in[1])};
    };
    const Function step = with_gradients(loss_of, params);
    auto batch = [&] {
      return std::vector<Tensor>{
          Tensor::randn({2, 4, 8, 8}, gen, dtype).contiguous(MemoryFormat::ChannelsLast),
          Tensor::randn({2, 4, 8, 8}, gen)};
    };
    CaptureOptions options;
    options.autograd = true;
    Graph g = capture(step, batch(), options);
    optim::AdamW adam(params, {.lr = 1e-2});
    for (int round = 0; round < 3; ++round) {
      const std::vector<Tensor> in = batch();
      const std::vector<Tensor> eager = step(in);
      const std::vector<Tensor>& replayed = g.run(in);
      ASSERT_EQ(replayed.size(), params.size() + 1);
      for (std::size_t i = 0; i < replayed.size(); ++i)
        EXPECT_TRUE(bit_equal(eager[i], replayed[i]))
            << dtype_name(dtype) << " round " << round << " output " << i;
      set_gradients(params, replayed);
      adam.step();
      adam.zero_grad();
    }
  }
}

// Without the option a backward inside the function has nothing to run on: a clear error.
TEST(Graph, BackwardWithoutAutogradIsAClearError) {
  Generator gen(12);
  nn::Linear fc{8, 4, true, gen};
  const Function step = with_gradients(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(fc.forward(in[0]))}; },
      fc.parameters());
  EXPECT_NE(error_of([&] { capture(step, {Tensor::randn({2, 8}, gen)}); }).find("scalar"),
            std::string::npos);
}

}  // namespace
}  // namespace mixprec::graph
