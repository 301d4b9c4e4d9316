#include "mixprec/models/video_quality.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "mixprec/mode/grad_mode.h"
#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/io/json.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/conv.h"

namespace mixprec::models {
namespace {

// An RGB frame [3, H, W] or [1, 3, H, W] in [-1, 1] -> f64 [3, H, W] on [0, 1].
Tensor unit_planes(const Tensor& frame, const char* op) {
  const Tensor x = frame.dim() == 4 && frame.size(0) == 1 ? frame.select(0, 0) : frame;
  MIXPREC_CHECK(x.dim() == 3 && x.size(0) == 3 && x.size(1) >= 3 && x.size(2) >= 3, "[", op,
                "] expected an RGB frame [3, H, W] (H, W >= 3), got ",
                shape_to_string(frame.shape()));
  Tensor out = x.to(DType::F64).contiguous().clone();
  double* v = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) v[i] = (std::clamp(v[i], -1.0, 1.0) + 1.0) / 2.0;
  return out;
}

// ITU-R BT.601 luminance of an RGB value.
double luminance(double r, double g, double b) { return 0.299 * r + 0.587 * g + 0.114 * b; }

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

FrameMeasures measure_frame(const Tensor& frame) {
  const Tensor p = unit_planes(frame, "measure_frame");
  const int64_t h = p.size(1), w = p.size(2), n = h * w;
  const double* r = p.data<double>();
  const double* g = r + n;
  const double* b = g + n;
  FrameMeasures m;
  std::vector<double> luma(static_cast<std::size_t>(n)), rg(luma.size()), yb(luma.size());
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    luma[k] = luminance(r[i], g[i], b[i]);
    rg[k] = 255.0 * (r[i] - g[i]);
    yb[k] = 255.0 * (0.5 * (r[i] + g[i]) - b[i]);
  }
  for (int c = 0; c < 3; ++c) {
    const std::vector<double> plane(r + c * n, r + (c + 1) * n);
    m.mean[static_cast<std::size_t>(c)] = mean_of(plane);
    m.stddev[static_cast<std::size_t>(c)] = std_of(plane);
  }
  m.contrast = std_of(luma);
  m.colourfulness = std::hypot(std_of(rg), std_of(yb)) + 0.3 * std::hypot(mean_of(rg), mean_of(yb));
  // Edge strength: the 98th percentile of the luminance gradient magnitude (central differences,
  // interior pixels). A frame's sharpest 2% are its shapes' outlines; blur lowers them, while
  // per-pixel grain (whose gradients are small but everywhere) barely moves the percentile, as
  // it would move a mean of squared Laplacians.
  std::vector<double> gradient;
  for (int64_t y = 1; y + 1 < h; ++y)
    for (int64_t x = 1; x + 1 < w; ++x) {
      const auto at = [&](int64_t yy, int64_t xx) { return luma[static_cast<std::size_t>(yy * w + xx)]; };
      gradient.push_back(std::hypot(at(y, x + 1) - at(y, x - 1), at(y + 1, x) - at(y - 1, x)) / 2);
    }
  const auto rank = static_cast<std::ptrdiff_t>(0.98 * static_cast<double>(gradient.size() - 1));
  std::nth_element(gradient.begin(), gradient.begin() + rank, gradient.end());
  m.sharpness = gradient[static_cast<std::size_t>(rank)];
  m.shapes = static_cast<double>(count_shapes(frame));
  return m;
}

int64_t count_shapes(const Tensor& frame, const ShapeCriteria& criteria) {
  const Tensor p = unit_planes(frame, "count_shapes");
  const int64_t h = p.size(1), w = p.size(2), n = h * w;
  const double* v = p.data<double>();
  // Edge map: the largest central-difference gradient over the channels (one-sided at borders),
  // and which channel it was in.
  std::vector<double> gradient(static_cast<std::size_t>(n), 0);
  std::vector<int64_t> channel(static_cast<std::size_t>(n), 0);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const int64_t x0 = std::max<int64_t>(x - 1, 0), x1 = std::min(x + 1, w - 1);
      const int64_t y0 = std::max<int64_t>(y - 1, 0), y1 = std::min(y + 1, h - 1);
      const auto i = static_cast<std::size_t>(y * w + x);
      for (int64_t c = 0; c < 3; ++c) {
        const double* q = v + c * n;
        const double gx = (q[y * w + x1] - q[y * w + x0]) / static_cast<double>(x1 - x0);
        const double gy = (q[y1 * w + x] - q[y0 * w + x]) / static_cast<double>(y1 - y0);
        const double g = std::hypot(gx, gy);
        if (g > gradient[i]) {
          gradient[i] = g;
          channel[i] = c;
        }
      }
    }
  const auto is_edge = [&](std::size_t i) { return gradient[i] > criteria.edge_gradient; };
  // 4-connected regions of non-edge pixels, by an explicit stack (no recursion on a large frame).
  constexpr int64_t kUnlabelled = -1, kEdge = -2;
  std::vector<int64_t> label(static_cast<std::size_t>(n), kUnlabelled), sizes, stack;
  for (std::size_t i = 0; i < label.size(); ++i)
    if (is_edge(i)) label[i] = kEdge;
  const auto neighbours = [&](int64_t i, auto&& visit) {
    const int64_t y = i / w, x = i % w;
    if (y > 0) visit(i - w);
    if (y + 1 < h) visit(i + w);
    if (x > 0) visit(i - 1);
    if (x + 1 < w) visit(i + 1);
  };
  for (int64_t start = 0; start < n; ++start) {
    if (label[static_cast<std::size_t>(start)] != kUnlabelled) continue;
    const auto region = static_cast<int64_t>(sizes.size());
    int64_t size = 0;
    label[static_cast<std::size_t>(start)] = region;
    stack.push_back(start);
    while (!stack.empty()) {
      const int64_t i = stack.back();
      stack.pop_back();
      ++size;
      neighbours(i, [&](int64_t j) {
        if (label[static_cast<std::size_t>(j)] == kUnlabelled) {
          label[static_cast<std::size_t>(j)] = region;
          stack.push_back(j);
        }
      });
    }
    sizes.push_back(size);
  }
  if (sizes.empty()) return 0;
  const auto background = static_cast<int64_t>(
      std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
  // Outline sharpness of an edge pixel: its gradient over the height of the step it belongs to,
  // the range of its channel in the (2r + 1)^2 window around it. For a straight edge blurred by a
  // Gaussian of sigma px this is (1 / (sigma sqrt(2 pi))) / erf(r / (sigma sqrt 2)), falling
  // towards 1 / (2r) as the blur widens.
  constexpr int64_t r = 3;
  const auto outline_sharpness = [&](int64_t i) {
    const int64_t y = i / w, x = i % w;
    const double* q = v + channel[static_cast<std::size_t>(i)] * n;
    double lo = 1, hi = 0;
    for (int64_t yy = std::max<int64_t>(y - r, 0); yy <= std::min(y + r, h - 1); ++yy)
      for (int64_t xx = std::max<int64_t>(x - r, 0); xx <= std::min(x + r, w - 1); ++xx) {
        lo = std::min(lo, q[yy * w + xx]);
        hi = std::max(hi, q[yy * w + xx]);
      }
    return gradient[static_cast<std::size_t>(i)] / std::max(hi - lo, 1e-12);
  };
  // Each region's outline: the edge pixels 4-adjacent to it, each counted once per region.
  std::vector<double> outline_sum(sizes.size(), 0);
  std::vector<int64_t> outline_count(sizes.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (label[static_cast<std::size_t>(i)] != kEdge) continue;
    const double s = outline_sharpness(i);
    std::array<int64_t, 4> touched{};
    std::size_t count = 0;
    neighbours(i, [&](int64_t j) {
      const int64_t region = label[static_cast<std::size_t>(j)];
      if (region >= 0 && std::find(touched.begin(), touched.begin() + count, region) ==
                             touched.begin() + count)
        touched[count++] = region;
    });
    for (std::size_t t = 0; t < count; ++t) {
      outline_sum[static_cast<std::size_t>(touched[t])] += s;
      ++outline_count[static_cast<std::size_t>(touched[t])];
    }
  }
  int64_t shapes = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (static_cast<int64_t>(k) == background || sizes[k] < criteria.min_pixels) continue;
    const double sharp = outline_count[k] == 0
                             ? 0.0
                             : outline_sum[k] / static_cast<double>(outline_count[k]);
    shapes += sharp >= criteria.min_outline_sharpness ? 1 : 0;
  }
  return shapes;
}

FrameEncoder::FrameEncoder() {
  Generator gen(0x4b1dULL);  // fixed: the features must mean the same in every run
  int64_t in = 3;
  for (const int64_t out : {32, 64, 128}) {
    weights_.push_back(
        Tensor::normal({out, in, 3, 3}, 0.0, std::sqrt(2.0 / static_cast<double>(in * 9)), gen));
    in = out;
  }
  // The first layer's filters sum to zero over each 3x3 window: they see edges and textures,
  // not the flat colour that dominates a frame's pixels (which the channel means below keep).
  Tensor& first = weights_.front();
  float* w = first.data<float>();
  for (int64_t f = 0; f < first.size(0) * first.size(1); ++f) {
    float mean = 0;
    for (int k = 0; k < 9; ++k) mean += w[f * 9 + k] / 9;
    for (int k = 0; k < 9; ++k) w[f * 9 + k] -= mean;
  }
}

Tensor FrameEncoder::features(const Tensor& frames) const {
  MIXPREC_CHECK(frames.dim() == 4 && frames.size(1) == 3, "[FrameEncoder] expected frames [N, 3, H, W], got ",
                shape_to_string(frames.shape()));
  NoGrad no_grad;
  const int64_t n = frames.size(0);
  Tensor out = Tensor::empty({n, kDim}, DType::F64);
  Tensor h = frames.to(DType::F32).contiguous();
  int64_t column = 0;
  for (const Tensor& w : weights_) {
    h = relu(conv2d(h, w, Tensor(), {.stride = 2, .padding = 1})).contiguous();
    const int64_t c = h.size(1), hw = h.size(2) * h.size(3);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* v = h.data<float>() + (i * c + ch) * hw;
        double s = 0, s2 = 0;
        for (int64_t k = 0; k < hw; ++k) {
          s += v[k];
          s2 += static_cast<double>(v[k]) * v[k];
        }
        const double m = s / static_cast<double>(hw);
        out.data<double>()[i * kDim + column + ch] = m;
        out.data<double>()[i * kDim + column + c + ch] =
            std::sqrt(std::max(0.0, s2 / static_cast<double>(hw) - m * m));
      }
    column += 2 * c;
  }
  MIXPREC_ASSERT(column == kDim);
  return out;
}

double kernel_inception_distance(const Tensor& a, const Tensor& b) {
  MIXPREC_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1) && a.size(0) >= 2 &&
                    b.size(0) >= 2,
                "[kid] expected feature sets [N, D] and [M, D] with N, M >= 2, got ",
                shape_to_string(a.shape()), " and ", shape_to_string(b.shape()));
  const Tensor x = a.to(DType::F64).contiguous(), y = b.to(DType::F64).contiguous();
  const int64_t n = x.size(0), m = y.size(0), d = x.size(1);
  auto k = [&](const double* p, const double* q) {
    double dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += p[i] * q[i];
    const double base = dot / static_cast<double>(d) + 1.0;
    return base * base * base;
  };
  const double* px = x.data<double>();
  const double* py = y.data<double>();
  double xx = 0, yy = 0, xy = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (i != j) xx += k(px + i * d, px + j * d);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j)
      if (i != j) yy += k(py + i * d, py + j * d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) xy += k(px + i * d, py + j * d);
  const auto dn = static_cast<double>(n), dm = static_cast<double>(m);
  return xx / (dn * (dn - 1)) + yy / (dm * (dm - 1)) - 2 * xy / (dn * dm);
}

double psnr(const Tensor& a, const Tensor& b) {
  const Tensor x = unit_planes(a, "psnr"), y = unit_planes(b, "psnr");
  MIXPREC_CHECK(x.shape() == y.shape(), "[psnr] shapes differ: ", shape_to_string(x.shape()),
                " and ", shape_to_string(y.shape()));
  double se = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x.data<double>()[i] - y.data<double>()[i];
    se += d * d;
  }
  const double mse = se / static_cast<double>(x.numel());
  if (mse == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(1.0 / mse);  // on [0, 1]: the same as peak-to-peak 2 on [-1, 1]
}

void VideoQualityMeter::Sweep::add(const Tensor& unit_planes) {
  const int64_t n = unit_planes.size(1) * unit_planes.size(2);
  const double* r = unit_planes.data<double>();
  if (lo.empty()) {
    lo.assign(static_cast<std::size_t>(n), std::numeric_limits<double>::infinity());
    hi.assign(lo.size(), -std::numeric_limits<double>::infinity());
  }
  for (int64_t i = 0; i < n; ++i) {
    const double luma = luminance(r[i], r[n + i], r[2 * n + i]);
    lo[static_cast<std::size_t>(i)] = std::min(lo[static_cast<std::size_t>(i)], luma);
    hi[static_cast<std::size_t>(i)] = std::max(hi[static_cast<std::size_t>(i)], luma);
  }
}

double VideoQualityMeter::Sweep::swept() const {
  std::size_t count = 0;
  for (std::size_t i = 0; i < lo.size(); ++i) count += hi[i] - lo[i] > kSweptSpan ? 1 : 0;
  return lo.empty() ? 0.0 : static_cast<double>(count) / static_cast<double>(lo.size());
}

VideoQualityMeter::VideoQualityMeter(int64_t window) : window_(window) {
  MIXPREC_CHECK(window >= 1, "[VideoQualityMeter] window must be >= 1, got ", window);
}

void VideoQualityMeter::add(const Tensor& generated, const Tensor& real) {
  if (frames() > 0 && frames() % window_ == 0) {  // a window is finished
    swept_generated_.push_back(sweep_generated_.swept());
    swept_real_.push_back(sweep_real_.swept());
    sweep_generated_ = {};
    sweep_real_ = {};
  }
  auto seen = [&](const Tensor& frame, Tensor& last, Sweep& sweep) {
    const Tensor f = unit_planes(frame, "VideoQualityMeter");
    sweep.add(f);
    Seen s;
    s.measures = measure_frame(frame);
    if (last.defined()) {
      MIXPREC_CHECK(last.shape() == f.shape(), "[VideoQualityMeter] frame size changed from ",
                    shape_to_string(last.shape()), " to ", shape_to_string(f.shape()));
      double d = 0;
      for (int64_t i = 0; i < f.numel(); ++i)
        d += std::abs(f.data<double>()[i] - last.data<double>()[i]);
      s.change = d / static_cast<double>(f.numel());
    }
    last = f;
    const Tensor feat =
        encoder_.features((frame.dim() == 3 ? frame.unsqueeze(0) : frame).to(DType::F32));
    s.features.assign(feat.data<double>(), feat.data<double>() + FrameEncoder::kDim);
    return s;
  };
  Seen g = seen(generated, last_generated_, sweep_generated_),
       r = seen(real, last_real_, sweep_real_);
  psnr_.push_back(std::min(100.0, psnr(generated, real)));
  generated_.push_back(std::move(g));
  real_.push_back(std::move(r));
}

namespace {

FrameMeasures mean_measures(const std::vector<FrameMeasures>& all) {
  FrameMeasures m;
  for (const FrameMeasures& f : all) {
    m.sharpness += f.sharpness;
    m.colourfulness += f.colourfulness;
    m.contrast += f.contrast;
    m.shapes += f.shapes;
    for (std::size_t c = 0; c < 3; ++c) {
      m.mean[c] += f.mean[c];
      m.stddev[c] += f.stddev[c];
    }
  }
  const auto n = static_cast<double>(std::max<std::size_t>(all.size(), 1));
  m.sharpness /= n;
  m.colourfulness /= n;
  m.contrast /= n;
  m.shapes /= n;
  for (std::size_t c = 0; c < 3; ++c) {
    m.mean[c] /= n;
    m.stddev[c] /= n;
  }
  return m;
}

}  // namespace

VideoQualityReport VideoQualityMeter::report() const {
  VideoQualityReport r;
  r.frames = frames();
  auto first_psnr = [&](int64_t count) -> std::optional<double> {
    if (frames() < count) return std::nullopt;
    double s = 0;
    for (int64_t i = 0; i < count; ++i) s += psnr_[static_cast<std::size_t>(i)];
    return s / static_cast<double>(count);
  };
  r.psnr_first_10 = first_psnr(10);
  r.psnr_first_25 = first_psnr(25);
  for (int64_t first = 0; first < frames(); first += window_) {
    WindowQuality w;
    w.first = first;
    w.last = std::min(first + window_, frames());
    std::vector<FrameMeasures> gm, rm;
    Tensor gf = Tensor::empty({w.last - w.first, FrameEncoder::kDim}, DType::F64);
    Tensor rf = Tensor::empty(gf.shape(), DType::F64);
    int64_t changes = 0;
    for (int64_t i = w.first; i < w.last; ++i) {
      const Seen& g = generated_[static_cast<std::size_t>(i)];
      const Seen& re = real_[static_cast<std::size_t>(i)];
      gm.push_back(g.measures);
      rm.push_back(re.measures);
      if (i > 0) {
        w.change += g.change;
        w.real_change += re.change;
        ++changes;
      }
      std::copy(g.features.begin(), g.features.end(),
                gf.data<double>() + (i - w.first) * FrameEncoder::kDim);
      std::copy(re.features.begin(), re.features.end(),
                rf.data<double>() + (i - w.first) * FrameEncoder::kDim);
    }
    w.generated = mean_measures(gm);
    w.real = mean_measures(rm);
    if (changes > 0) {
      w.change /= static_cast<double>(changes);
      w.real_change /= static_cast<double>(changes);
    }
    if (w.last - w.first >= 2) w.kid = kernel_inception_distance(gf, rf);
    const auto index = static_cast<std::size_t>(first / window_);
    const bool finished = index < swept_generated_.size();
    w.swept = finished ? swept_generated_[index] : sweep_generated_.swept();
    w.real_swept = finished ? swept_real_[index] : sweep_real_.swept();
    r.windows.push_back(std::move(w));
  }
  return r;
}

QualityVerdict judge(const WindowQuality& w, double tolerance) {
  QualityVerdict v;
  char line[160];
  auto within = [&](const char* name, double got, double want) {
    if (std::abs(got - want) <= tolerance * std::abs(want)) return;
    std::snprintf(line, sizeof line, "%s %.4g vs real %.4g (more than %.0f%% off)", name, got,
                  want, 100 * tolerance);
    v.failures.emplace_back(line);
  };
  within("sharpness", w.generated.sharpness, w.real.sharpness);
  within("colourfulness", w.generated.colourfulness, w.real.colourfulness);
  within("contrast", w.generated.contrast, w.real.contrast);
  const double drift = std::sqrt(std::pow(w.generated.mean[0] - w.real.mean[0], 2) +
                                 std::pow(w.generated.mean[1] - w.real.mean[1], 2) +
                                 std::pow(w.generated.mean[2] - w.real.mean[2], 2));
  if (drift > kMaxColourDrift) {
    std::snprintf(line, sizeof line, "colour drift %.3f (mean RGB distance, over %.2f)", drift,
                  kMaxColourDrift);
    v.failures.emplace_back(line);
  }
  if (w.last - w.first >= 2 && (w.change < 0.5 * w.real_change || w.change > 2 * w.real_change)) {
    std::snprintf(line, sizeof line, "change %.4g vs real %.4g (%s)", w.change, w.real_change,
                  w.change < w.real_change ? "frozen: under half" : "flicker: over twice");
    v.failures.emplace_back(line);
  }
  if (w.last - w.first >= kMinSweptFrames &&
      w.swept < kMinSweptRatio * w.real_swept - kSweptSlack) {
    std::snprintf(line, sizeof line,
                  "swept %.0f%% of the frame vs real %.0f%% (shapes stay where they are)",
                  100 * w.swept, 100 * w.real_swept);
    v.failures.emplace_back(line);
  }
  if (w.kid && *w.kid > kMaxKid) {
    std::snprintf(line, sizeof line, "KID %.2e over %.0e (frames unlike the video's)", *w.kid,
                  kMaxKid);
    v.failures.emplace_back(line);
  }
  if (std::abs(w.generated.shapes - w.real.shapes) > 1.0) {
    std::snprintf(line, sizeof line, "shapes %.2f vs real %.2f (more than 1 apart)",
                  w.generated.shapes, w.real.shapes);
    v.failures.emplace_back(line);
  }
  v.pass = v.failures.empty();
  return v;
}

namespace {

std::string number(double v) { return io::json_number(v); }
std::string number(const std::optional<double>& v) { return v ? number(*v) : "null"; }

std::string measures_json(const FrameMeasures& m) {
  std::ostringstream o;
  o << "{\"sharpness\": " << number(m.sharpness) << ", \"colourfulness\": "
    << number(m.colourfulness) << ", \"contrast\": " << number(m.contrast)
    << ", \"shapes\": " << number(m.shapes) << ", \"mean_rgb\": [" << number(m.mean[0]) << ", "
    << number(m.mean[1]) << ", " << number(m.mean[2]) << "], \"std_rgb\": ["
    << number(m.stddev[0]) << ", " << number(m.stddev[1]) << ", " << number(m.stddev[2]) << "]}";
  return o.str();
}

std::string kid(const std::optional<double>& v) {
  if (!v) return "n/a";
  char s[32];
  std::snprintf(s, sizeof s, "%.2e", *v);
  return s;
}

}  // namespace

std::string quality_report_json(const VideoQualityReport& r) {
  std::ostringstream o;
  o << "{\"frames\": " << r.frames << ", \"psnr_first_10\": " << number(r.psnr_first_10)
    << ", \"psnr_first_25\": " << number(r.psnr_first_25) << ", \"windows\": [";
  for (std::size_t i = 0; i < r.windows.size(); ++i) {
    const WindowQuality& w = r.windows[i];
    const QualityVerdict v = judge(w);
    o << (i ? ", " : "") << "{\"first\": " << w.first << ", \"last\": " << w.last
      << ", \"generated\": " << measures_json(w.generated)
      << ", \"real\": " << measures_json(w.real) << ", \"change\": " << number(w.change)
      << ", \"real_change\": " << number(w.real_change) << ", \"swept\": " << number(w.swept)
      << ", \"real_swept\": " << number(w.real_swept) << ", \"kid\": " << number(w.kid)
      << ", \"alive\": " << (v.pass ? "true" : "false") << "}";
  }
  o << "]}";
  return o.str();
}

std::string quality_report_text(const VideoQualityReport& r) {
  std::ostringstream o;
  char line[256];
  auto db = [](const std::optional<double>& v) {
    char s[32];
    if (!v) return std::string("n/a (too few frames)");
    std::snprintf(s, sizeof s, "%.2f dB", *v);
    return std::string(s);
  };
  std::snprintf(line, sizeof line, "PSNR vs the true continuation: frames 1-10 %s, 1-25 %s\n",
                db(r.psnr_first_10).c_str(), db(r.psnr_first_25).c_str());
  o << line
    << "frames     | sharpness gen/real | colourful gen/real | contrast gen/real | "
       "change gen/real  | swept gen/real | shapes gen/real | KID      | alive\n";
  for (const WindowQuality& w : r.windows) {
    const QualityVerdict v = judge(w);
    std::snprintf(line, sizeof line,
                  "%4lld-%-5lld | %7.4f / %-8.4f | %6.1f / %-9.1f | %6.4f / %-8.4f | %6.4f / "
                  "%-7.4f | %5.2f / %-6.2f | %5.2f / %-7.2f | %-8s | %s\n",
                  static_cast<long long>(w.first), static_cast<long long>(w.last),
                  w.generated.sharpness, w.real.sharpness, w.generated.colourfulness,
                  w.real.colourfulness, w.generated.contrast, w.real.contrast, w.change,
                  w.real_change, w.swept, w.real_swept, w.generated.shapes, w.real.shapes, kid(w.kid).c_str(),
                  v.pass ? "yes" : "no");
    o << line;
    for (const std::string& f : v.failures) o << "           " << f << "\n";
  }
  return o.str();
}

}  // namespace mixprec::models
