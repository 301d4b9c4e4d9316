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

// The shipped model is an anchor-map model shown as rigid sprites (docs/VIDEO.md, sessions 12 to
// 15): it reads every shape from the newest real frame, so its first windows are exact and
// alive; over 1000 frames it is not yet alive everywhere (issue #12). This gate holds it to what
// it measures with a margin for other kernel levels, so a regression in the model, the stream or
// the sprites fails here.
// Measured 2026-11-26 (Xeon, AMX, bf16, 2 threads, session 15's O1): PSNR over frames 1-10 29.7
// and 29.1 dB; KID of frames 0-100 1.3e-4 and 3.6e-5; both windows of both videos alive.
constexpr double kMinPsnrFirst10 = 26.0;  // dB
constexpr double kMaxKidFirstWindow = 1e-3;

const std::string kShippedModel =
    std::string(MIXPREC_SOURCE_DIR) + "/checkpoints/video_anchor_map.safetensors";

// 200 frames of the shipped model in bf16 (true half precision, as `make demo` runs it), started
// as `mixprec video generate` starts it on a held-out video, measured against that video's
// continuation.
VideoQualityReport shipped_stream_report(int64_t held_out) {
  ModelStream s = open_model_stream(kShippedModel, data::MovingShapesConfig{}.held_out(held_out),
                                    {}, DType::BF16);
  const int64_t k = s.model->config().context_frames;
  VideoQualityMeter meter(100);
  for (int64_t i = 0; i < 200; ++i)
    meter.add(s.stream->next(), quantize_8bit(s.videos.frame(s.video, k + i)));
  return meter.report();
}

TEST(ShippedVideoModel, QualityDoesNotRegressOver200Frames) {
  for (const int64_t held_out : {0, 1}) {
    const VideoQualityReport r = shipped_stream_report(held_out);
    SCOPED_TRACE("held-out video " + std::to_string(held_out) + "\n" + quality_report_text(r));
    ASSERT_EQ(r.windows.size(), 2u);
    EXPECT_GE(*r.psnr_first_10, kMinPsnrFirst10);
    EXPECT_LE(*r.windows[0].kid, kMaxKidFirstWindow);
    // Alive over the first 100 frames: every measure within 30% of the real frames', shapes
    // moving as much as the real ones and as many.
    const QualityVerdict first = judge(r.windows[0]);
    EXPECT_TRUE(first.pass) << ::testing::PrintToString(first.failures);
  }
}

}  // namespace
}  // namespace mixprec::models
