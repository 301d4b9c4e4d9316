// The quality gate of the shipped video model (issue #12): its stream must stay alive, measured
// by the same report `mixprec video generate` prints. Not a timing test: it checks what the
// frames look like, whatever the machine's speed.
#include <gtest/gtest.h>

#include <string>

#include "mixprec/data/moving_shapes.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_quality.h"

namespace mixprec::models {
namespace {

// The shipped model does not stay alive yet (issue #12 is open: its shapes dissolve within
// ~50 frames, docs/perf-log/2026-11-25-session-4.md); until one does, this gate holds it to
// what it measures, with a margin for other kernel levels, so a regression in the model, the
// sampler or the stream fails here. Measured 2026-11-25 (AMD EPYC, avx512bf16): PSNR over
// frames 1-10 23.0 and 23.9 dB; KID of frames 0-100 about 1.2e-3 to 1.6e-3.
constexpr double kMinPsnrFirst10 = 21.5;  // dB
constexpr double kMaxKidFirstWindow = 4e-3;

const std::string kShippedModel =
    std::string(MIXPREC_SOURCE_DIR) + "/checkpoints/video_lightweight.safetensors";

// 200 frames of the shipped model in bf16 (true half precision, as `make demo` runs it), 4 DDIM
// steps, from the first frames of a held-out video, measured against that video's continuation.
VideoQualityReport shipped_stream_report(int64_t held_out, uint64_t seed) {
  VideoModelInfo info;
  auto model = load_video_model(kShippedModel, &info);
  model->to(DType::BF16);
  const data::MovingShapes videos({}, std::stoull(info.extra.at("seed")));
  const int64_t video = videos.config().held_out(held_out);
  const int64_t k = model->config().context_frames;
  VideoStream stream(*model, NoiseSchedule::cosine(info.schedule_steps), videos.clip(video, 0, k),
                     {.steps = 4, .prediction = info.prediction, .seed = seed, .residual = info.residual});
  VideoQualityMeter meter(100);
  for (int64_t i = 0; i < 200; ++i)
    meter.add(stream.next(), quantize_8bit(videos.frame(video, k + i)));
  return meter.report();
}

TEST(ShippedVideoModel, QualityDoesNotRegressOver200Frames) {
  for (const int64_t held_out : {0, 1}) {
    const VideoQualityReport r = shipped_stream_report(held_out, static_cast<uint64_t>(held_out));
    SCOPED_TRACE("held-out video " + std::to_string(held_out) + "\n" + quality_report_text(r));
    ASSERT_EQ(r.windows.size(), 2u);
    EXPECT_GE(*r.psnr_first_10, kMinPsnrFirst10);
    EXPECT_LE(*r.windows[0].kid, kMaxKidFirstWindow);
    // Still moving (not frozen) and not saturated into noise in the first window.
    EXPECT_GE(r.windows[0].change, 0.5 * r.windows[0].real_change);
    EXPECT_LE(r.windows[0].change, 4 * r.windows[0].real_change);
  }
}

}  // namespace
}  // namespace mixprec::models
