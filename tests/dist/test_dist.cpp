// Data-parallel training on MPI (issue #20), run by CTest as `mpirun -np 2 test_dist`: the
// communicator's collectives, the bucketed f32 gradient all-reduce against gradients computed
// on the whole batch in one process, loss-scaling agreement when only rank 1 overflows, and the
// GPT trainer on 2 ranks x batch b against one process on batch 2b.
//
// Every test runs on every rank; the references are computed inside each rank, alone (no
// collectives), so a test cannot pass by comparing a rank with itself through MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/core/communicator.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/gpt_train.h"
#include "mixprec/models/text_dataset.h"
#include "mixprec/nn/data_parallel.h"
#include "mixprec/ops/arith.h"
#include "mixprec/optim/adam.h"

namespace mixprec {
namespace {

const Communicator* g_world = nullptr;
const Communicator& world() { return *g_world; }

const models::TextDataset& corpus() {
  static const models::TextDataset data =
      models::TextDataset::from_file(std::string(MIXPREC_SOURCE_DIR) + "/data/shakespeare.txt");
  return data;
}

constexpr int64_t kContext = 16;
models::GPTConfig tiny() {
  return {.vocab = 256, .context = kContext, .layers = 1, .d_model = 32, .heads = 4};
}

// This rank's shard (batch b, index i * size + rank) of the single process's batch i of b*size.
models::TokenBatch shard(int64_t b, int64_t index, int rank) {
  return corpus().batch_at(models::Split::Train, b, kContext, 7, index * world().size() + rank);
}

// The gradients of `model` on `batch`, as f32 copies (a fresh backward).
std::vector<Tensor> gradients(models::GPT& model, const models::TokenBatch& batch, double weight) {
  for (const Tensor& p : model.parameters()) p.zero_grad();
  mul(model.loss(batch.inputs, batch.targets), weight).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : model.parameters()) g.push_back(p.grad().to(DType::F32));
  return g;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(DType::F64).contiguous(), y = b.to(DType::F64).contiguous();
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    m = std::max(m, std::fabs(x.data<double>()[i] - y.data<double>()[i]));
  return m;
}

double max_abs(const Tensor& a) { return max_abs_diff(a, Tensor::zeros(a.shape(), DType::F32)); }

// Started without mpirun (CTest dist.world_of_one): one rank, collectives are the identity and
// MPI is never initialized.
TEST(Communicator, AloneIsAWorldOfOne) {
  if (world().distributed()) GTEST_SKIP() << "under mpirun";
  EXPECT_EQ(Communicator::launched_ranks(), 1);
  EXPECT_EQ(world().rank(), 0);
  EXPECT_EQ(world().size(), 1);
  std::vector<float> v = {1.5f, -2.0f};
  world().all_reduce_sum(v);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_TRUE(world().any(true));
  EXPECT_FALSE(world().any(false));
  EXPECT_EQ(world().all_reduce_sum(0.25), 0.25);
  Communicator::Request request = world().start_all_reduce_sum(v);
  EXPECT_FALSE(request.pending());
  models::GPTTrainOptions options{.precision = amp::PrecisionConfig::parse("fp32"),
                                  .batch = 2,
                                  .world = &world()};
  Generator gen(5);
  models::GPT model(tiny(), gen);
  models::GPTTrainer trainer(model, corpus(), options);
  EXPECT_EQ(trainer.data_parallel(), nullptr) << "a world of one reduces nothing";
}

TEST(Communicator, Collectives) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  const int r = world().rank();
  std::vector<float> v = {static_cast<float>(r + 1), 10.0f * static_cast<float>(r + 1)};
  world().all_reduce_sum(v);
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[1], 30.0f);
  EXPECT_EQ(world().all_reduce_sum(0.25 + r), 1.5);
  EXPECT_TRUE(world().any(r == 1));
  EXPECT_FALSE(world().any(false));
  int64_t value = r == 1 ? 42 : -1;
  world().broadcast(&value, sizeof value, 1);
  EXPECT_EQ(value, 42);
  std::vector<float> w(1000, static_cast<float>(r));
  Communicator::Request request = world().start_all_reduce_sum(w);
  request.wait();
  EXPECT_FALSE(request.pending());
  EXPECT_EQ(w[999], 1.0f);
  world().barrier();
}

// The reduced gradient is the whole batch's: rank r's shard gradient averaged over ranks equals
// the gradient of the mean loss over both shards computed alone; with Sum, twice that.
// Small buckets, so most start during backward; without overlap the same bits.
TEST(DataParallel, MeanOverRanksIsTheWholeBatchGradient) {
  for (const bool overlap : {true, false})
    for (const nn::GradReduction reduction : {nn::GradReduction::Mean, nn::GradReduction::Sum}) {
      Generator gen(3);
      models::GPT model(tiny(), gen);
      Generator gen_ref(3);
      models::GPT reference(tiny(), gen_ref);
      // The whole batch's gradient alone: both shards, each weighted 1/2.
      const std::vector<Tensor> g0 = gradients(reference, shard(2, 0, 0), 0.5);
      const std::vector<Tensor> g1 = gradients(reference, shard(2, 0, 1), 0.5);

      nn::DataParallel dp(world(), model.parameters(),
                          {.reduction = reduction, .bucket_mb = 0.004, .overlap = overlap});
      EXPECT_GT(dp.num_buckets(), 3);
      dp.expect_gradients();
      const models::TokenBatch mine = shard(2, 0, world().rank());
      model.loss(mine.inputs, mine.targets).backward();
      dp.finish();
      const double factor = reduction == nn::GradReduction::Sum ? 2.0 : 1.0;
      const std::vector<Tensor> params = model.parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        const Tensor expected = mul(add(g0[i], g1[i]), factor);
        ASSERT_EQ(params[i].grad().dtype(), DType::F32);
        EXPECT_LE(max_abs_diff(params[i].grad(), expected), 1e-6 * (1 + max_abs(expected)))
            << "parameter " << i << (overlap ? " overlapped" : " after backward");
      }
      if (overlap)
        EXPECT_GT(dp.times().buckets_in_backward, dp.num_buckets() / 2)
            << "buckets should start while backward runs";
      else
        EXPECT_EQ(dp.times().buckets_in_backward, 0);
      EXPECT_EQ(dp.times().buckets, dp.num_buckets());
    }
}

// bf16 gradients are summed in f32: the result is the exact f32 mean of the two ranks' bf16
// gradients (a sum of two bf16 values and a halving are exact in f32), not a bf16 rounding.
TEST(DataParallel, HalfGradientsAreSummedInF32) {
  Generator gen(3);
  models::GPT model(tiny(), gen);
  model.to(DType::BF16);
  Generator gen_ref(3);
  models::GPT reference(tiny(), gen_ref);
  reference.to(DType::BF16);
  std::vector<Tensor> own[2];
  for (int r = 0; r < 2; ++r) {
    for (const Tensor& p : reference.parameters()) p.zero_grad();
    const models::TokenBatch b = shard(2, 0, r);
    reference.loss(b.inputs, b.targets).backward();
    for (const Tensor& p : reference.parameters()) own[r].push_back(p.grad().to(DType::F32));
  }
  nn::DataParallel dp(world(), model.parameters());
  dp.expect_gradients();
  const models::TokenBatch mine = shard(2, 0, world().rank());
  model.loss(mine.inputs, mine.targets).backward();
  dp.finish();
  bool some_not_bf16 = false;
  const std::vector<Tensor> params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor expected = mul(add(own[0][i], own[1][i]), 0.5);
    ASSERT_EQ(params[i].grad().dtype(), DType::F32);
    EXPECT_EQ(max_abs_diff(params[i].grad(), expected), 0.0) << "parameter " << i;
    if (params[i].dtype() == DType::BF16)
      some_not_bf16 |= max_abs_diff(expected, expected.to(DType::BF16)) > 0;
  }
  EXPECT_TRUE(some_not_bf16) << "the f32 means should not all be bf16 values";
}

// Only rank 1 sees an inf (injected into its gradient after the all-reduce, where nothing would
// carry it to rank 0): agree_found_inf makes every rank skip, and the scales stay equal.
TEST(DataParallel, OverflowOnRankOneSkipsTheStepOnEveryRank) {
  Generator gen(3);
  models::GPT model(tiny(), gen);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  amp::GradScaler scaler({.init_scale = 1024.0});
  nn::DataParallel dp(world(), model.parameters());
  const uint64_t before = nn::parameter_checksum(model.parameters());
  auto step = [&](int64_t index, bool inject) {
    dp.expect_gradients();
    const models::TokenBatch mine = shard(2, index, world().rank());
    scaler.scale(model.loss(mine.inputs, mine.targets)).backward();
    dp.finish();
    if (inject && world().rank() == 1)
      model.parameters()[0].grad().narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
    scaler.unscale(opt);
    scaler.agree_found_inf(world());
    const bool stepped = scaler.step(opt);
    scaler.update();
    opt.zero_grad();
    return stepped;
  };
  EXPECT_FALSE(step(0, true)) << "rank " << world().rank() << " stepped";
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(nn::parameter_checksum(model.parameters()), before) << "weights changed";
  EXPECT_TRUE(nn::replicas_agree(world(), model.parameters()));
  EXPECT_TRUE(step(1, false));
  EXPECT_NE(nn::parameter_checksum(model.parameters()), before);
  EXPECT_TRUE(nn::replicas_agree(world(), model.parameters()));
}

TEST(DataParallel, ReplicasDisagreeUntilBroadcast) {
  Generator gen(3);
  models::GPT model(tiny(), gen);
  EXPECT_TRUE(nn::replicas_agree(world(), model.parameters()));
  if (world().rank() == 1) model.parameters().back().narrow(0, 0, 1).fill_(0.125);
  EXPECT_FALSE(nn::replicas_agree(world(), model.parameters()));
  nn::broadcast_parameters(world(), model.parameters());
  EXPECT_TRUE(nn::replicas_agree(world(), model.parameters()));
}

// The target: 2 ranks x batch b give the losses of one process on batch 2b, within 1e-5
// relative at every step in f32 and 1e-3 in bf16 after 50 steps.
// With grad_accum > 1 each rank runs that many micro-batches of batch 4 / (2 x grad_accum).
void expect_same_losses(const std::string& precision, int64_t steps, double tolerance,
                        bool every_step, int64_t grad_accum = 1) {
  auto options = [&](int64_t batch, int64_t accumulate, const Communicator* w) {
    return models::GPTTrainOptions{.precision = amp::PrecisionConfig::parse(precision),
                                   .batch = batch,
                                   .lr = 3e-3,
                                   .warmup = 5,
                                   .total_steps = steps,
                                   .seed = 7,
                                   .grad_accum = accumulate,
                                   .world = w,
                                   .data_parallel = {.bucket_mb = 0.01}};
  };
  Generator gen(5), gen_alone(5);
  models::GPT model(tiny(), gen), alone(tiny(), gen_alone);
  models::GPTTrainer ranks(model, corpus(), options(2 / grad_accum, grad_accum, &world()));
  models::GPTTrainer single(alone, corpus(), options(4, 1, nullptr));
  ASSERT_NE(ranks.data_parallel(), nullptr);
  ASSERT_EQ(single.data_parallel(), nullptr);
  double worst = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const double a = ranks.step(s), b = single.step(s);
    const double rel = std::abs(a / b - 1);
    worst = std::max(worst, rel);
    if (every_step || s + 1 == steps) {
      EXPECT_LE(rel, tolerance) << precision << " step " << s + 1 << ": " << a << " vs " << b;
    }
  }
  const double va = ranks.evaluate(2), vb = single.evaluate(2);
  EXPECT_LE(std::abs(va / vb - 1), tolerance) << precision << " validation";
  EXPECT_TRUE(nn::replicas_agree(world(), model.parameters()));
  if (world().is_root())
    std::printf("%s: 2 ranks x %lld sequences x %lld micro-batches vs 1 x 4 over %lld steps: "
                "worst relative loss difference %.2e\n",
                precision.c_str(), static_cast<long long>(2 / grad_accum),
                static_cast<long long>(grad_accum), static_cast<long long>(steps), worst);
}

TEST(DataParallelGPT, TwoRanksEqualOneProcessOnTwiceTheBatchF32) {
  expect_same_losses("fp32", 20, 1e-5, true);
}

TEST(DataParallelGPT, TwoRanksEqualOneProcessOnTwiceTheBatchBf16) {
  expect_same_losses("bf16", 50, 1e-3, false);
}

// Each rank's micro-batches are slices of the single process's batch too.
TEST(DataParallelGPT, TwoRanksWithAccumulationEqualOneProcessF32) {
  expect_same_losses("fp32", 10, 1e-5, true, 2);
}

TEST(DataParallelGPT, TwoRanksEqualOneProcessOnTwiceTheBatchFp16Params) {
  expect_same_losses("fp16-params", 20, 1e-2, false);
}

}  // namespace
}  // namespace mixprec

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const mixprec::Communicator world;
  mixprec::g_world = &world;
  return RUN_ALL_TESTS();
}
