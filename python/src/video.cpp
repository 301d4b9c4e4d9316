// mixprec.video: a trained video model's stream, frame by frame (models/video_streams.h). The
// C++ side holds the model and the stream together; python/mixprec/video.py makes it an
// iterator of numpy frames.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <cmath>
#include <memory>
#include <string>

#include "bindings.h"
#include "mixprec/core/error.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"

namespace mixprec::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;

// A model file's stream as `mixprec video generate` makes it: started on the first frames of a
// video of the dataset the model was trained on (a held-out one for video < 0), with the
// model file's recommended stream settings unless given. The network runs in `dtype` (true
// half precision for bf16/f16: weights converted, norms f32).
class ModelStream {
 public:
  ModelStream(const std::string& checkpoint, DType dtype, int64_t video, int64_t seed,
              int64_t steps, double context_noise)
      : model_(models::load_video_model(checkpoint, &info_)) {
    MIXPREC_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
                  "[VideoStream] dtype must be f32, bf16 or f16, got ", dtype_name(dtype));
    MIXPREC_CHECK(steps >= 1, "[VideoStream] steps must be >= 1, got ", steps);
    if (dtype != DType::F32) model_->to(dtype);
    const data::MovingShapes videos = models::training_dataset(info_, checkpoint);
    video_ = video < 0 ? videos.config().held_out(0) : video;
    const models::StreamOptions options = models::stream_options(
        info_, checkpoint, {.steps = steps, .seed = seed, .context_noise = context_noise});
    stream_ = std::make_unique<models::VideoStream>(
        *model_, models::NoiseSchedule::cosine(info_.schedule_steps),
        videos.clip(video_, 0, model_->config().context_frames), options);
  }

  // [3, H, W] f32 in [-1, 1], on 8-bit levels.
  Tensor next() { return stream_->next().squeeze(0); }
  int64_t frames_generated() const { return stream_->frames_generated(); }
  int64_t video() const { return video_; }
  std::string prediction() const { return models::prediction_name(info_.prediction); }

 private:
  models::VideoModelInfo info_;
  std::unique_ptr<models::UNetVideo> model_;
  std::unique_ptr<models::VideoStream> stream_;
  int64_t video_ = 0;
};

}  // namespace

void bind_video(nb::module_& m) {
  nb::class_<ModelStream>(m, "_VideoStream",
                          "A trained video model's stream (mixprec.video.VideoStream wraps it).")
      .def(
          "__init__",
          [](ModelStream* self, const std::string& checkpoint, nb::handle dtype, int64_t video,
             int64_t seed, int64_t steps, nb::object context_noise) {
            const double noise =
                context_noise.is_none() ? std::nan("") : nb::cast<double>(context_noise);
            const DType d = dtype_arg(dtype);
            nb::gil_scoped_release release;
            new (self) ModelStream(checkpoint, d, video, seed, steps, noise);
          },
          nb::arg("checkpoint"), nb::arg("dtype"), nb::arg("video"), nb::arg("seed"),
          nb::arg("steps"), nb::arg("context_noise").none())
      .def("next", &ModelStream::next, Release(), "The next frame, [3, H, W] f32 in [-1, 1].")
      .def_prop_ro("frames_generated", &ModelStream::frames_generated)
      .def_prop_ro("video", &ModelStream::video)
      .def_prop_ro("prediction", &ModelStream::prediction);
}

}  // namespace mixprec::python
