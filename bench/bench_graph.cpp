// Graph replay of a model written with plain ops (issue #14): what the graph's epilogue fusion
// (CaptureOptions::fuse_epilogues) gives a user's own model, side by side with the same model
// written with the fused ops a hand-tuned model calls.
//
// Three models, batch 1, inference:
//   resblocks   a U-Net level: 4 residual blocks of 64 channels at S x S (channels_last), each
//               GroupNorm -> SiLU -> 3x3 conv -> GroupNorm -> SiLU -> 3x3 conv -> + x; bf16;
//   resblocks-autocast  the same blocks in f32 under bf16 autocast: the convolutions run in
//               bf16, the GroupNorms in f32, with a cast at each change (the replay folds them
//               into the kernels that make their input);
//   mlp         a transformer's 4 MLP blocks on [T, 384]: Linear -> GELU -> Linear -> + x; bf16.
// Each is timed four ways in interleaved rounds: the plain model eagerly; its replay with every
// pass but epilogue fusion (planning only: bit-identical to eager); its replay with epilogue
// fusion (the activations, adds and casts folded into their producers); and the hand-fused model
// eagerly. The fused replay must equal the hand-fused eager output bit for bit (it runs the same
// kernels); the program says whether it does.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/graph/graph.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/functional.h"

namespace {

using namespace mixprec;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

const char* kUsage =
    "Usage: bench_graph [--quick] [--json] [--threads N]\n"
    "A model written with plain ops, eagerly and replayed from a graph (planning only; with its\n"
    "activations, adds and casts folded into their producers), beside the same model written\n"
    "with fused ops: ms per forward, batch 1.";

struct ResBlock {
  nn::GroupNorm norm1{16, 64}, norm2{16, 64};
  nn::Conv2d conv1, conv2;
  ResBlock(Generator& gen, DType dtype)
      : conv1(64, 64, 3, {.padding = 1}, true, gen), conv2(64, 64, 3, {.padding = 1}, true, gen) {
    for (nn::Module* m : std::initializer_list<nn::Module*>{&norm1, &norm2, &conv1, &conv2}) {
      m->to(dtype);
      m->to(MemoryFormat::ChannelsLast);
    }
  }
  Tensor plain(const Tensor& x) {
    const Tensor h = conv1.forward(silu(norm1.forward(x)));
    return add(conv2.forward(silu(norm2.forward(h))), x);
  }
  Tensor fused(const Tensor& x) {
    auto gn_silu = [](nn::GroupNorm& n, const Tensor& t) {
      const std::vector<Tensor> p = n.parameters();
      return group_norm(t, 16, p[0], p[1], 1e-5, kernels::Activation::SiLU);
    };
    const Tensor h = conv1.forward(gn_silu(norm1, x));
    return conv2.forward(gn_silu(norm2, h), x);
  }
};

struct MlpBlock {
  nn::Linear fc1, fc2;
  explicit MlpBlock(Generator& gen) : fc1(384, 1536, true, gen), fc2(1536, 384, true, gen) {
    fc1.to(DType::BF16);
    fc2.to(DType::BF16);
  }
  Tensor plain(const Tensor& x) { return add(fc2.forward(gelu(fc1.forward(x))), x); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options o = bench::parse_options(argc, argv, kUsage);
  if (o.threads > 0) set_num_threads(o.threads);
  Generator gen(3);
  const int size = 32, tokens = 256, rounds = o.quick ? 10 : 60;
  std::vector<std::unique_ptr<ResBlock>> blocks, f32_blocks;
  std::vector<std::unique_ptr<MlpBlock>> mlps;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(std::make_unique<ResBlock>(gen, DType::BF16));
    f32_blocks.push_back(std::make_unique<ResBlock>(gen, DType::F32));
    mlps.push_back(std::make_unique<MlpBlock>(gen));
  }
  struct Model {
    std::string name;
    Fn plain, fused;  // fused: empty where the hand-fused ops are the plain ones' fused kernels
    Tensor input;
  };
  const std::vector<Model> models{
      {"resblocks", [&](const std::vector<Tensor>& in) {
         Tensor x = in[0];
         for (auto& b : blocks) x = b->plain(x);
         return std::vector<Tensor>{x};
       },
       [&](const std::vector<Tensor>& in) {
         Tensor x = in[0];
         for (auto& b : blocks) x = b->fused(x);
         return std::vector<Tensor>{x};
       },
       Tensor::randn({1, 64, size, size}, gen, DType::BF16).contiguous(MemoryFormat::ChannelsLast)},
      {"resblocks-autocast", [&](const std::vector<Tensor>& in) {
         amp::Autocast autocast(DType::BF16);
         Tensor x = in[0];
         for (auto& b : f32_blocks) x = b->plain(x);
         return std::vector<Tensor>{x};
       },
       {}, Tensor::randn({1, 64, size, size}, gen).contiguous(MemoryFormat::ChannelsLast)},
      {"mlp", [&](const std::vector<Tensor>& in) {
         Tensor x = in[0];
         for (auto& m : mlps) x = m->plain(x);
         return std::vector<Tensor>{x};
       },
       {}, Tensor::randn({tokens, 384}, gen, DType::BF16)}};

  std::vector<bench::Row> rows;
  for (const Model& m : models) {
    graph::CaptureOptions planning_only;
    planning_only.fuse_epilogues = false;
    graph::Graph unfused = graph::capture(m.plain, {m.input}, planning_only);
    graph::Graph fused = graph::capture(m.plain, {m.input});
    InferenceMode inference;
    std::vector<std::function<void()>> fns{
        [&] { m.plain({m.input}); }, [&] { unfused.run({m.input}); },
        [&] { fused.run({m.input}); }};
    if (m.fused) fns.push_back([&] { m.fused({m.input}); });
    const std::vector<bench::Timing> t = bench::time_interleaved(fns, 3, rounds, 0.0);
    const bool matches_hand_fused =
        m.fused && same_bits(fused.run({m.input})[0], m.fused({m.input})[0]);
    const double eager_ms = t[0].median_s * 1e3;
    bench::Row row;
    row.text("model", m.name)
        .num("threads", num_threads(), 0)
        .num("eager_ms", eager_ms, 3)
        .num("replay_ms", t[1].median_s * 1e3, 3)
        .num("fused_replay_ms", t[2].median_s * 1e3, 3)
        .num("hand_fused_eager_ms", m.fused ? t[3].median_s * 1e3 : NAN, 3)
        .num("replay_x", eager_ms / (t[1].median_s * 1e3), 3)
        .num("fused_replay_x", eager_ms / (t[2].median_s * 1e3), 3)
        .num("kernels", static_cast<double>(unfused.size()), 0)
        .num("fused_kernels", static_cast<double>(fused.size()), 0)
        .text("fused_replay_is_hand_fused_eager",
              m.fused ? (matches_hand_fused ? "bit for bit" : "NO") : "-");
    rows.push_back(row);
  }
  bench::print_table(rows, o);
  bench::print_json("bench_graph", rows);
  return 0;
}
