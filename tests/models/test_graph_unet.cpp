// The video stream's step as a graph: four DDIM steps of a UNetVideo, captured once, replayed
// frame after frame bit for bit as the eager stream computes them, without allocating.
#include <gtest/gtest.h>

#include "mixprec/core/random.h"
#include "mixprec/graph/graph.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/diffusion.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_diffusion.h"
#include "support/bit_equal.h"

namespace mixprec::models {
namespace {

using test_support::bit_equal;

UNetVideoConfig small() {
  UNetVideoConfig c = UNetVideoConfig::lightweight();
  c.base_channels = 16;
  c.groups = 4;
  c.context_frames = 2;
  return c;
}

TEST(GraphUNet, StreamStepReplaysBitIdenticallyWithoutAllocating) {
  Generator gen(11);
  UNetVideo model(small(), gen);
  model.to(DType::BF16);
  const NoiseSchedule schedule = NoiseSchedule::cosine();
  auto step = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sample_next_frames(model, schedule, in[0], Tensor(), in[1], 4,
                                                  Prediction::V, DType::BF16)};
  };
  auto inputs = [&] {
    return std::vector<Tensor>{
        Tensor::uniform({1, 6, 32, 32}, -1, 1, gen).to(DType::BF16).contiguous(
            MemoryFormat::ChannelsLast),
        Tensor::randn({1, 3, 32, 32}, gen)};
  };
  graph::CaptureOptions planning_only;  // as a stream captures: no rounding changed
  planning_only.fuse_epilogues = false;
  graph::Graph g = graph::capture(step, inputs(), planning_only);
  for (int frame = 0; frame < 3; ++frame) {
    const std::vector<Tensor> in = inputs();
    Tensor eager;
    {
      InferenceMode inference;
      eager = step(in)[0];
    }
    EXPECT_TRUE(bit_equal(eager, g.run(in)[0])) << "frame " << frame;
  }
  const std::vector<Tensor> in = inputs();
  g.run(in);
  const MemoryStats before = CachingAllocator::global().stats();
  g.run(in);
  EXPECT_EQ(CachingAllocator::global().stats().num_allocs, before.num_allocs);
  // Four forwards' activations in one plan: far below what the eager run held at its peak.
  EXPECT_LT(g.memory().arena_bytes, g.memory().eager_peak_bytes);
  EXPECT_GT(g.size(), 100u);
}

}  // namespace
}  // namespace mixprec::models
