// mixprec.video: a trained video model's stream, frame by frame (models/video_streams.h). The
// C++ side holds the model and the stream together; python/mixprec/video.py makes it an
// iterator of numpy frames.
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "bindings.h"
#include "mixprec/core/error.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_streams.h"

namespace mixprec::python {
namespace {

using Release = nb::call_guard<nb::gil_scoped_release>;

// A model file's stream as `mixprec video generate` makes it (models::open_model_stream). The
// network runs in `dtype` (true half precision for bf16/f16: weights converted, norms f32).
class ModelStream {
 public:
  ModelStream(const std::string& checkpoint, DType dtype, int64_t video, int64_t seed,
              int64_t steps, double context_noise)
      : opened_(open(checkpoint, dtype, video, seed, steps, context_noise)) {}

  // [3, H, W] f32 in [-1, 1], on 8-bit levels.
  Tensor next() { return opened_.stream->next().squeeze(0); }
  int64_t frames_generated() const { return opened_.stream->frames_generated(); }
  int64_t video() const { return opened_.video; }
  std::string prediction() const { return models::prediction_name(opened_.info.prediction); }

 private:
  static models::ModelStream open(const std::string& checkpoint, DType dtype, int64_t video,
                                  int64_t seed, int64_t steps, double context_noise) {
    MIXPREC_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
                  "[VideoStream] dtype must be f32, bf16 or f16, got ", dtype_name(dtype));
    return models::open_model_stream(
        checkpoint, video, {.steps = steps, .seed = seed, .context_noise = context_noise}, dtype);
  }
  models::ModelStream opened_;
};

Tensor unet_forward(models::UNetVideo& model, const Tensor& x_t, const Tensor& context,
                    const Tensor& timesteps, nb::handle context_sigma) {
  const Tensor sigma = context_sigma.is_none() ? Tensor() : nb::cast<Tensor>(context_sigma);
  nb::gil_scoped_release release;
  return model.forward(x_t, context, timesteps, sigma);
}

}  // namespace

void bind_video(nb::module_& m) {
  using models::UNetVideo;
  nb::class_<UNetVideo, nn::Module>(
      m, "UNetVideo",
      "The video diffusion U-Net (models/unet_video.h): UNetVideo(preset, seed) builds a preset "
      "('lightweight', 'medium', 'heavy', 'xl') with weights drawn from seed.")
      .def(
          "__init__",
          [](UNetVideo* self, const std::string& preset, uint64_t seed) {
            Generator gen(seed);
            new (self) UNetVideo(models::UNetVideoConfig::preset(preset), gen);
          },
          nb::arg("preset") = "lightweight", nb::arg("seed") = 0)
      .def("forward", &unet_forward, nb::arg("x_t"), nb::arg("context"), nb::arg("timesteps"),
           nb::arg("context_sigma") = nb::none(),
           "x_t [B, 3, H, W], context [B, 3F, H, W], timesteps [B] -> the prediction in x_t's "
           "dtype; the GIL is released while it runs.")
      .def("__call__", &unet_forward, nb::arg("x_t"), nb::arg("context"), nb::arg("timesteps"),
           nb::arg("context_sigma") = nb::none())
      .def_prop_ro("preset", [](const UNetVideo& m) { return m.config().name; })
      .def_prop_ro("context_frames", [](const UNetVideo& m) { return m.config().input_frames(); })
      .def_prop_ro(
          "context_channels", [](const UNetVideo& m) { return m.config().context_channels(); },
          "The context input's channels: 3 per context frame, and 2 more (the previous "
          "frame's flow) for a flow-input model.")
      .def("parameter_count", &UNetVideo::parameter_count)
      .def("gflop_per_forward", &UNetVideo::gflop_per_forward, nb::arg("height"), nb::arg("width"));
  m.def(
      "load_video_model",
      [](const std::string& path) { return models::load_video_model(path, nullptr); },
      nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
      "The network of a video model file (f32 parameters; .to('bf16') for half precision).");
  // The yardstick of docs/PYTHON.md's U-Net overhead figure: `reps` forwards called from C++
  // in a loop (as bench/bench_unet_forward does), seconds each, so that a Python loop of the
  // same calls can be timed beside it in one process.
  m.def(
      "_forward_seconds_from_cpp",
      [](UNetVideo& model, const Tensor& x_t, const Tensor& context, const Tensor& timesteps,
         int64_t reps) {
        nb::gil_scoped_release release;
        std::vector<double> seconds;
        for (int64_t i = 0; i < reps; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          model.forward(x_t, context, timesteps);
          seconds.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return seconds;
      },
      nb::arg("model"), nb::arg("x_t"), nb::arg("context"), nb::arg("timesteps"), nb::arg("reps"));

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
