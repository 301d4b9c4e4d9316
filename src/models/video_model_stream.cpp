// open_model_stream (models/video_model_file.h): what `mixprec video generate` and the Python
// VideoStream share, so that both start a model file's stream the same way.
#include "mixprec/core/error.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/nn/precision.h"

namespace mixprec::models {

ModelStream open_model_stream(const std::string& path, int64_t video, const StreamRequest& request,
                              DType weights, std::shared_ptr<const amp::PrecisionPlan> plan) {
  MIXPREC_CHECK(video >= -1, "[video stream] the start video must be a dataset video (>= 0), or -1 "
                "for a held-out one, got ", video);
  MIXPREC_CHECK(request.steps >= 1, "[video stream] steps must be >= 1, got ", request.steps);
  VideoModelInfo info;
  std::unique_ptr<UNetVideo> model = load_video_model(path, &info);
  if (weights != DType::F32) model->to(weights);
  if (plan) {
    amp::PrecisionConfig planned;
    planned.plan = std::move(plan);
    nn::to_precision(*model, planned);
  }
  data::MovingShapes videos = training_dataset(info, path);
  const int64_t start = video >= 0 ? video : videos.config().held_out(0);
  StreamOptions options = stream_options(info, path, request);
  std::unique_ptr<UNetVideo> restorer;
  if (!request.restorer.empty()) {
    restorer = load_restorer(request.restorer, weights);
    options.restorer = restorer.get();
  }
  auto stream = std::make_unique<VideoStream>(
      *model, NoiseSchedule::cosine(info.schedule_steps),
      videos.clip(start, 0, model->config().context_frames), options);
  return {.info = std::move(info),
          .model = std::move(model),  // the stream's reference stays valid: the network does not move
          .videos = std::move(videos),
          .video = start,
          .options = options,
          .restorer = std::move(restorer),  // as the model: the stream's pointer stays valid
          .stream = std::move(stream)};
}

}  // namespace mixprec::models
