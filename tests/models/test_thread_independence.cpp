// Results depend on the inputs only: the same bits with 1, 2 and 3 threads and with a worker
// that starts late (as a preempted one does), for a video U-Net forward in f32 and bf16, its
// training gradients, and the reductions whose split once followed the thread count.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mixprec/core/parallel.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/nn/init.h"
#include "mixprec/ops/functional.h"
#include "mixprec/ops/reduce.h"
#include "video_test_util.h"

namespace mixprec::models {
namespace {

using Outputs = std::vector<Tensor>;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(),
                     static_cast<std::size_t>(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// Runs `compute` under each schedule and expects every output to match the 1-thread bits.
void expect_schedule_independent(const std::function<Outputs()>& compute) {
  struct Schedule {
    std::string name;
    int threads;
    std::chrono::microseconds worker_delay;
  };
  const std::vector<Schedule> schedules{{"1 thread", 1, {}},
                                        {"2 threads", 2, {}},
                                        {"3 threads", 3, {}},
                                        {"2 threads, a worker 2 ms late", 2,
                                         std::chrono::milliseconds(2)}};
  const int saved = num_threads();
  std::vector<Outputs> results;
  for (const Schedule& s : schedules) {
    set_num_threads(s.threads);
    detail::set_worker_delay(s.worker_delay);
    results.push_back(compute());
  }
  set_num_threads(saved);
  detail::set_worker_delay({});
  for (std::size_t s = 1; s < schedules.size(); ++s)
    for (std::size_t i = 0; i < results[0].size(); ++i)
      EXPECT_TRUE(same_bits(results[s][i], results[0][i]))
          << "output " << i << " differs between 1 thread and " << schedules[s].name;
}

// The lightweight preset the video stream runs, past the near-zero init of the residual
// branches so every layer matters.
void spread_weights(UNetVideo& net) {
  Generator gen(5);
  for (const Tensor& p : net.parameters())
    if (p.dim() == 4) nn::init::normal_(p, 0.0, 0.1, gen);
}

TEST(ThreadIndependence, VideoUNetForwardF32AndBf16) {
  Generator gen(6);
  UNetVideo net(UNetVideoConfig::preset("lightweight"), gen);
  spread_weights(net);
  const Tensor x = Tensor::randn({1, 3, 64, 64}, gen), ctx = Tensor::randn({1, 3, 64, 64}, gen);
  const Tensor t = Tensor::from_vector<int64_t>({400});
  NoGrad no_grad;
  expect_schedule_independent([&] { return Outputs{net.forward(x, ctx, t)}; });
  net.to(DType::BF16);
  expect_schedule_independent(
      [&] { return Outputs{net.forward(x.to(DType::BF16), ctx.to(DType::BF16), t)}; });
}

TEST(ThreadIndependence, VideoUNetGradients) {
  Generator gen(7);
  UNetVideo net(test::tiny_unet(), gen);
  spread_weights(net);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, gen), ctx = Tensor::randn({2, 3, 16, 16}, gen);
  expect_schedule_independent([&] {
    for (const Tensor& p : net.parameters()) p.zero_grad();
    const Tensor loss = mse_loss(net.forward(x, ctx, Tensor::from_vector<int64_t>({3, 700})), x);
    loss.backward();
    Outputs out{loss};
    for (const Tensor& p : net.parameters()) out.push_back(p.grad());
    return out;
  });
}

// A long line's sum, a large MSE and a channels_last group norm: reductions with partial sums.
TEST(ThreadIndependence, SplitReductions) {
  Generator gen(8);
  const Tensor line = Tensor::randn({(int64_t{1} << 20) + 77}, gen);
  const Tensor a = Tensor::randn({3, 300001}, gen), b = Tensor::randn({3, 300001}, gen);
  const Tensor image =
      Tensor::randn({2, 32, 48, 48}, gen).contiguous(MemoryFormat::ChannelsLast);
  NoGrad no_grad;
  expect_schedule_independent([&] {
    return Outputs{sum(line), sum(line.to(DType::BF16)), mse_loss(a, b), group_norm(image, 8)};
  });
}

}  // namespace
}  // namespace mixprec::models
