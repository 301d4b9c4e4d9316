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
// 16): it reads every shape from the newest real frame, and its network sees a recent frame as
// its anchor (StreamRequest::anchor_refresh). This gate holds it to what it measures with a
// margin for other kernel levels, so a regression in the model, the stream, the sprites or the
// anchor refresh fails here.
// Measured 2026-11-27 (Xeon, AMX, bf16, 2 threads, session 15's O1 with session 16's refresh):
// PSNR over frames 1-10 29.7 and 27.3 dB (videos 0 and 3); all 6 windows of frames 0-300 alive
// (without the refresh 4: video 3 stops after its first window); over 1000 frames, 45 of 50
// windows of five videos.
constexpr double kMinPsnrFirst10 = 26.0;  // dB
constexpr double kMaxKidFirstWindow = 1e-3;

const std::string kShippedModel =
    std::string(MIXPREC_SOURCE_DIR) + "/checkpoints/video_anchor_map.safetensors";

// `frames` frames of the shipped model in bf16 (true half precision, as `make demo` runs it),
// started as `mixprec video generate` starts it on a held-out video (with its default anchor
// refresh unless `anchor_refresh` says otherwise), measured against that video's continuation.
VideoQualityReport shipped_stream_report(int64_t held_out, int64_t frames,
                                         int64_t anchor_refresh = StreamRequest{}.anchor_refresh) {
  ModelStream s = open_model_stream(kShippedModel, data::MovingShapesConfig{}.held_out(held_out),
                                    {.anchor_refresh = anchor_refresh}, DType::BF16);
  const int64_t k = s.model->config().context_frames;
  VideoQualityMeter meter(100);
  for (int64_t i = 0; i < frames; ++i)
    meter.add(s.stream->next(), quantize_8bit(s.videos.frame(s.video, k + i)));
  return meter.report();
}

TEST(ShippedVideoModel, QualityDoesNotRegressOver300Frames) {
  int64_t alive = 0, windows = 0;
  for (const int64_t held_out : {0, 3}) {
    const VideoQualityReport r = shipped_stream_report(held_out, 300);
    SCOPED_TRACE("held-out video " + std::to_string(held_out) + "\n" + quality_report_text(r));
    ASSERT_EQ(r.windows.size(), 3u);
    EXPECT_GE(*r.psnr_first_10, kMinPsnrFirst10);
    EXPECT_LE(*r.windows[0].kid, kMaxKidFirstWindow);
    // Alive: every measure within 30% of the real frames', shapes moving as much as the real
    // ones and as many. The first window always; later ones all but one of the four (a margin
    // for other kernel levels, whose rounding sends a stream along another path).
    EXPECT_TRUE(judge(r.windows[0]).pass) << ::testing::PrintToString(judge(r.windows[0]).failures);
    for (const WindowQuality& window : r.windows) {
      alive += judge(window).pass ? 1 : 0;
      ++windows;
    }
  }
  EXPECT_GE(alive, windows - 1) << alive << " of " << windows << " windows alive";
}

}  // namespace
}  // namespace mixprec::models
