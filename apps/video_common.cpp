#include "video_common.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/error.h"
#include "mixprec/nn/precision.h"

namespace mixprec::app {

std::string default_video_model_path() {
  return source_path("checkpoints/video_anchor_map.safetensors");
}

std::string sampler_text(const models::StreamOptions& options) {
  return (options.prediction == models::Prediction::Direct
              ? std::string("direct (1 forward)")
              : std::to_string(options.steps) + " DDIM steps") +
         (options.graph ? ", graph replay" : ", eager");
}

InferencePrecision parse_inference_precision(const std::string& name) {
  if (name == "auto") {
    const DType measured = amp::auto_precision().dtype;  // the probe's choice, cached
    InferencePrecision p = parse_inference_precision(measured == DType::BF16  ? "bf16"
                                                     : measured == DType::F16 ? "fp16"
                                                                              : "fp32");
    p.name = "auto(" + p.name + ")";
    return p;
  }
  if (name.starts_with("plan:")) {
    amp::PrecisionConfig c = amp::PrecisionConfig::parse(name);
    return {c.name(), DType::F32, false, DType::BF16, c.plan};
  }
  if (name == "fp32") return {name, DType::F32, false, DType::BF16, nullptr};
  if (name == "bf16") return {name, DType::BF16, false, DType::BF16, nullptr};
  if (name == "fp16") return {name, DType::F16, false, DType::F16, nullptr};
  if (name == "autocast-bf16") return {name, DType::F32, true, DType::BF16, nullptr};
  if (name == "autocast-fp16") return {name, DType::F32, true, DType::F16, nullptr};
  throw UsageError{
      "--precision must be auto|fp32|fp16|bf16|autocast-bf16|autocast-fp16|plan:FILE, got '" +
      name + "'"};
}

void apply_precision(models::UNetVideo& model, const InferencePrecision& p) {
  if (p.weights != DType::F32) model.to(p.weights);
  if (p.plan) {
    amp::PrecisionConfig c;
    c.plan = p.plan;
    nn::to_precision(model, c);
  }
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const auto rank =
      static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

double median(const std::vector<double>& values) { return percentile(values, 50); }

std::size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

namespace {

// [1, C, H, W] or [C, H, W] -> contiguous f64 [C, H, W].
Tensor planes(const Tensor& t) {
  Tensor x = t.dim() == 4 ? t.select(0, 0) : t;
  MIXPREC_CHECK(x.dim() == 3, "[ssim] expected an image [C, H, W], got ",
                shape_to_string(t.shape()));
  return x.to(DType::F64).contiguous();
}

}  // namespace

double ssim(const Tensor& a, const Tensor& b) {
  const Tensor x = planes(a), y = planes(b);
  MIXPREC_CHECK(x.shape() == y.shape(), "[ssim] shapes differ");
  const int64_t c = x.size(0), h = x.size(1), w = x.size(2);
  constexpr int kRadius = 5;
  double kernel[2 * kRadius + 1], ksum = 0;
  for (int i = -kRadius; i <= kRadius; ++i) ksum += kernel[i + kRadius] = std::exp(-i * i / 4.5);
  for (double& k : kernel) k /= ksum;
  const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;  // for data range 1
  double total = 0;
  int64_t count = 0;
  for (int64_t ch = 0; ch < c; ++ch) {
    const double* px = x.data<double>() + ch * h * w;
    const double* py = y.data<double>() + ch * h * w;
    for (int64_t i = kRadius; i < h - kRadius; ++i)
      for (int64_t j = kRadius; j < w - kRadius; ++j) {
        double mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
        for (int di = -kRadius; di <= kRadius; ++di)
          for (int dj = -kRadius; dj <= kRadius; ++dj) {
            const double wgt = kernel[di + kRadius] * kernel[dj + kRadius];
            const double u = (px[(i + di) * w + j + dj] + 1) / 2;
            const double v = (py[(i + di) * w + j + dj] + 1) / 2;
            mx += wgt * u;
            my += wgt * v;
            sxx += wgt * u * u;
            syy += wgt * v * v;
            sxy += wgt * u * v;
          }
        const double vx = sxx - mx * mx, vy = syy - my * my, cxy = sxy - mx * my;
        total +=
            ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2));
        ++count;
      }
  }
  return count > 0 ? total / static_cast<double>(count) : 1.0;
}

}  // namespace mixprec::app
