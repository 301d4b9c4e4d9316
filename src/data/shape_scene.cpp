#include "mixprec/data/shape_scene.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::data {
namespace {

constexpr int64_t kMaxExtent = 16384;
constexpr std::size_t kMaxShapes = 64;

// Half-plane normals of the equilateral triangle in its own frame (edges opposite the
// vertices at local angles 270, 30 and 150 degrees); the inradius is half the circumradius.
constexpr double kSqrt3Over2 = 0.86602540378443864676;
constexpr float kTriangleNormals[3][2] = {{0.0f, 1.0f},
                                          {-static_cast<float>(kSqrt3Over2), -0.5f},
                                          {static_cast<float>(kSqrt3Over2), -0.5f}};

bool finite(double v) { return std::isfinite(v); }

// Folds an unbounded coordinate into [lo, hi] as a ball bouncing between two walls would:
// a triangle wave of period 2 (hi - lo).
double bounce(double p, double lo, double hi) {
  const double span = hi - lo;
  if (!(span > 0)) return 0.5 * (lo + hi);
  const double period = 2 * span;
  double m = (p - lo) - period * std::floor((p - lo) / period);
  m = std::clamp(m, 0.0, period);  // rounding can land a hair outside
  if (m > span) m = period - m;
  return lo + m;
}

// A smoothed triangle wave of period 1 in [0, 1]: C1-continuous, so the background pattern has
// no edges for the model to spend capacity on.
inline float smooth_wave(float u) {
  const float f = u - std::floor(u);
  const float tri = std::fabs(2.0f * f - 1.0f);
  return tri * tri * (3.0f - 2.0f * tri);
}

void render_background(const ShapeScene& scene, float* out) {
  const Background& bg = scene.background;
  const int64_t h = scene.height, w = scene.width;
  const double gc = det_cos(bg.gradient_angle), gs = det_sin(bg.gradient_angle);
  // Gradient coordinate g = 0 at one side of the frame and 1 at the other, along its direction.
  const double extent =
      std::fabs(gc) * static_cast<double>(w) + std::fabs(gs) * static_cast<double>(h);
  const float gx = static_cast<float>(gc / extent), gy = static_cast<float>(gs / extent);
  const float g0 = 0.5f - gx * 0.5f * static_cast<float>(w) - gy * 0.5f * static_cast<float>(h);
  const double pc = det_cos(bg.pattern_angle), ps = det_sin(bg.pattern_angle);
  const float ux = static_cast<float>(pc / bg.pattern_period);
  const float uy = static_cast<float>(ps / bg.pattern_period);
  const float amp = bg.pattern_amplitude;
  float d[3];
  for (int c = 0; c < 3; ++c) d[c] = bg.color1[c] - bg.color0[c];

  for (int64_t y = 0; y < h; ++y) {
    const float py = static_cast<float>(y) + 0.5f;
    float* row = out + y * w * 3;
    for (int64_t x = 0; x < w; ++x) {
      const float px = static_cast<float>(x) + 0.5f;
      const float g = std::clamp(g0 + gx * px + gy * py, 0.0f, 1.0f);
      float p = 0.0f;
      switch (bg.pattern) {
        case PatternKind::None:
          break;
        case PatternKind::Stripes:
          p = amp * (smooth_wave(ux * px + uy * py) - 0.5f);
          break;
        case PatternKind::Checks: {
          const float a = smooth_wave(ux * px + uy * py) - 0.5f;
          const float b = smooth_wave(ux * py - uy * px) - 0.5f;
          p = amp * 2.0f * a * b;
          break;
        }
      }
      for (int c = 0; c < 3; ++c)
        row[x * 3 + c] = std::clamp(bg.color0[c] + g * d[c] + p, 0.0f, 1.0f);
    }
  }
}

void render_shape(const ShapeSpec& s, int64_t h, int64_t w, int64_t t, float* out) {
  const auto [cx, cy] = shape_position(s, h, w, t);
  const double theta = s.angle + s.spin * static_cast<double>(t);
  const float c = static_cast<float>(det_cos(theta)), sn = static_cast<float>(det_sin(theta));
  const double bound = shape_bound_radius(s);
  const int64_t x0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(cx - bound - 1)));
  const int64_t x1 = std::min<int64_t>(w, static_cast<int64_t>(std::ceil(cx + bound + 1)));
  const int64_t y0 = std::max<int64_t>(0, static_cast<int64_t>(std::floor(cy - bound - 1)));
  const int64_t y1 = std::min<int64_t>(h, static_cast<int64_t>(std::ceil(cy + bound + 1)));
  const float fcx = static_cast<float>(cx), fcy = static_cast<float>(cy);
  const float size = static_cast<float>(s.size);
  const float half_h = static_cast<float>(s.size * s.aspect);
  const float shade = s.shading / static_cast<float>(bound);
  // The triangle's edge normals rotated into the frame once per shape, not per pixel.
  float tn[3][2];
  for (int k = 0; k < 3; ++k) {
    tn[k][0] = c * kTriangleNormals[k][0] - sn * kTriangleNormals[k][1];
    tn[k][1] = sn * kTriangleNormals[k][0] + c * kTriangleNormals[k][1];
  }
  const float inradius = 0.5f * size;

  for (int64_t y = y0; y < y1; ++y) {
    const float dy = static_cast<float>(y) + 0.5f - fcy;
    float* row = out + y * w * 3;
    for (int64_t x = x0; x < x1; ++x) {
      const float dx = static_cast<float>(x) + 0.5f - fcx;
      const float lx = c * dx + sn * dy;  // pixel offset in the shape's own frame
      float dist;                         // signed distance to the edge, negative inside
      switch (s.kind) {
        case ShapeKind::Circle:
          dist = std::sqrt(dx * dx + dy * dy) - size;
          break;
        case ShapeKind::Rectangle: {
          const float ly = c * dy - sn * dx;
          dist = std::max(std::fabs(lx) - size, std::fabs(ly) - half_h);
          break;
        }
        case ShapeKind::Triangle:
        default: {
          const float e0 = tn[0][0] * dx + tn[0][1] * dy;
          const float e1 = tn[1][0] * dx + tn[1][1] * dy;
          const float e2 = tn[2][0] * dx + tn[2][1] * dy;
          dist = std::max(e0, std::max(e1, e2)) - inradius;
          break;
        }
      }
      const float alpha = std::clamp(0.5f - dist, 0.0f, 1.0f);
      if (alpha <= 0.0f) continue;
      const float light = 1.0f + shade * lx;
      float* px = row + x * 3;
      for (int ch = 0; ch < 3; ++ch) {
        const float col = std::clamp(s.color[ch] * light, 0.0f, 1.0f);
        px[ch] += alpha * (col - px[ch]);
      }
    }
  }
}

// sin(x + shift * pi/2). Cody-Waite reduction by pi/2 with fdlibm's split constant (its high
// part has 33 significant bits, so k * kPio2Hi is exact for |k| < 2^20), then Taylor series on
// [-pi/4, pi/4], where the first omitted term is below 1e-17. The shift moves the quadrant
// instead of adding pi/2 to x, which would round.
double sin_quadrant(double x, int shift) {
  constexpr double kTwoOverPi = 6.36619772367581382433e-01;
  constexpr double kPio2Hi = 1.57079632673412561417e+00;
  constexpr double kPio2Lo = 6.07710050650619224932e-11;
  const double k = std::floor(x * kTwoOverPi + 0.5);
  const double r = (x - k * kPio2Hi) - k * kPio2Lo;
  const double r2 = r * r;
  const double q = (k + shift) - 4 * std::floor((k + shift) / 4);  // quadrant in {0, 1, 2, 3}
  if (q == 0 || q == 2) {  // +-sin r: sum (-1)^n r^(2n+1) / (2n+1)!
    const double s =
        r *
        (1 + r2 * (-1.0 / 6 +
                   r2 * (1.0 / 120 +
                         r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 +
                                                   r2 * (-1.0 / 39916800 +
                                                         r2 * (1.0 / 6227020800.0 +
                                                               r2 * (-1.0 / 1307674368000.0))))))));
    return q == 0 ? s : -s;
  }
  // +-cos r: sum (-1)^n r^(2n) / (2n)!
  const double c =
      1 + r2 * (-0.5 + r2 * (1.0 / 24 +
                             r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
                                                      r2 * (-1.0 / 3628800 +
                                                            r2 * (1.0 / 479001600 +
                                                                  r2 * (-1.0 / 87178291200.0)))))));
  return q == 1 ? c : -c;
}

}  // namespace

double det_sin(double x) { return sin_quadrant(x, 0); }

double det_cos(double x) { return sin_quadrant(x, 1); }

double shape_bound_radius(const ShapeSpec& shape) {
  switch (shape.kind) {
    case ShapeKind::Rectangle:
      return shape.size * std::sqrt(1 + shape.aspect * shape.aspect);
    case ShapeKind::Circle:
    case ShapeKind::Triangle:
    default:
      return shape.size;
  }
}

ShapeExtent shape_extent(const ShapeSpec& shape, int64_t t) {
  const double theta = shape.angle + shape.spin * static_cast<double>(t);
  const double c = det_cos(theta), sn = det_sin(theta);
  switch (shape.kind) {
    case ShapeKind::Rectangle: {
      const double half_h = shape.size * shape.aspect;
      const double ex = std::fabs(c) * shape.size + std::fabs(sn) * half_h;
      const double ey = std::fabs(sn) * shape.size + std::fabs(c) * half_h;
      return {ex, ex, ey, ey};
    }
    case ShapeKind::Triangle: {
      // The vertex opposite each edge lies one circumradius against that edge's normal.
      ShapeExtent e{-1e300, -1e300, -1e300, -1e300};
      for (const auto& n : kTriangleNormals) {
        const double vx = -shape.size * (c * n[0] - sn * n[1]);
        const double vy = -shape.size * (sn * n[0] + c * n[1]);
        e = {std::max(e.left, -vx), std::max(e.right, vx), std::max(e.top, -vy),
             std::max(e.bottom, vy)};
      }
      return e;
    }
    case ShapeKind::Circle:
    default:
      return {shape.size, shape.size, shape.size, shape.size};
  }
}

namespace {

// A shape's centre frame by frame, from frame 0: each advance() moves it by its velocity and
// reflects an axis whose edge crossed a wall off that wall, heading away from it. A spin that
// widens a shape at rest against a wall pushes it off the wall.
class ShapeMotion {
 public:
  ShapeMotion(const ShapeSpec& shape, int64_t height, int64_t width)
      : shape_(shape),
        width_(static_cast<double>(width)),
        height_(static_cast<double>(height)),
        vx_(shape.vx),
        vy_(shape.vy) {
    const ShapeExtent e = shape_extent(shape, 0);
    x_ = bounce(shape.x, e.left, width_ - e.right);
    y_ = bounce(shape.y, e.top, height_ - e.bottom);
  }
  std::array<double, 2> position() const { return {x_, y_}; }
  void advance() {
    const ShapeExtent e = shape_extent(shape_, ++t_);
    step(x_, vx_, e.left, width_ - e.right);
    step(y_, vy_, e.top, height_ - e.bottom);
  }

 private:
  static void step(double& p, double& v, double lo, double hi) {
    if (!(hi > lo)) {  // no room between the walls: the middle
      p = 0.5 * (lo + hi);
      return;
    }
    p += v;
    if (p < lo) p = 2 * lo - p, v = std::fabs(v);
    if (p > hi) p = 2 * hi - p, v = -std::fabs(v);
    p = std::clamp(p, lo, hi);  // a step longer than the room between the walls
  }
  const ShapeSpec& shape_;
  double width_, height_, vx_, vy_, x_ = 0, y_ = 0;
  int64_t t_ = 0;
};

}  // namespace

std::vector<std::array<double, 2>> shape_track(const ShapeSpec& shape, int64_t height,
                                               int64_t width, int64_t frames) {
  std::vector<std::array<double, 2>> track;
  ShapeMotion motion(shape, height, width);
  for (int64_t t = 0; t < frames; ++t) {
    if (t > 0) motion.advance();
    track.push_back(motion.position());
  }
  return track;
}

std::array<double, 2> shape_position(const ShapeSpec& shape, int64_t height, int64_t width,
                                     int64_t t) {
  MIXPREC_CHECK(t >= 0, "[shape_position] frame t must be >= 0, got ", t);
  ShapeMotion motion(shape, height, width);
  for (int64_t i = 0; i < t; ++i) motion.advance();
  return motion.position();
}

void validate_scene(const ShapeScene& scene, const char* op) {
  MIXPREC_CHECK(scene.height >= 1 && scene.height <= kMaxExtent && scene.width >= 1 &&
                    scene.width <= kMaxExtent,
                "[", op, "] frame size must be in [1, ", kMaxExtent, "], got ", scene.height, "x",
                scene.width);
  MIXPREC_CHECK(scene.shapes.size() <= kMaxShapes, "[", op, "] at most ", kMaxShapes,
                " shapes, got ", scene.shapes.size());
  const Background& bg = scene.background;
  auto unit = [](const std::array<float, 3>& c) {
    return std::all_of(c.begin(), c.end(), [](float v) { return v >= 0.0f && v <= 1.0f; });
  };
  MIXPREC_CHECK(unit(bg.color0) && unit(bg.color1), "[", op,
                "] background colours must be in [0, 1]");
  MIXPREC_CHECK(finite(bg.gradient_angle) && finite(bg.pattern_angle) && bg.pattern_period > 0 &&
                    finite(bg.pattern_period) && std::isfinite(bg.pattern_amplitude),
                "[", op, "] background angles, period (> 0) and amplitude must be finite");
  for (std::size_t i = 0; i < scene.shapes.size(); ++i) {
    const ShapeSpec& s = scene.shapes[i];
    MIXPREC_CHECK(static_cast<int>(s.kind) < kNumShapeKinds, "[", op, "] shape ", i,
                  ": unknown kind ", static_cast<int>(s.kind));
    MIXPREC_CHECK(finite(s.x) && finite(s.y) && finite(s.vx) && finite(s.vy) && finite(s.angle) &&
                      finite(s.spin) && std::isfinite(s.shading),
                  "[", op, "] shape ", i,
                  ": position, velocity, angle, spin and shading must be finite");
    MIXPREC_CHECK(s.size > 0 && finite(s.size) && s.aspect > 0 && finite(s.aspect), "[", op,
                  "] shape ", i, ": size and aspect must be positive and finite, got size ", s.size,
                  ", aspect ", s.aspect);
    MIXPREC_CHECK(unit(s.color), "[", op, "] shape ", i, ": colour must be in [0, 1]");
  }
}

void render_scene_hwc(const ShapeScene& scene, int64_t t, float* out) {
  render_background(scene, out);
  for (const ShapeSpec& s : scene.shapes) render_shape(s, scene.height, scene.width, t, out);
  const int64_t n = scene.height * scene.width * 3;
  for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * out[i] - 1.0f;
}

namespace {

// A shape at one frame, for the anchor map: its centre and rotation (double).
struct Pose {
  double cx = 0, cy = 0, theta = 0;
};

Pose pose_of(const ShapeSpec& s, int64_t h, int64_t w, int64_t t) {
  const auto [cx, cy] = shape_position(s, h, w, t);
  return {cx, cy, s.angle + s.spin * static_cast<double>(t)};
}

// The renderer's signed distance (pixels, negative inside) of point (x, y) to the edge of `s` at
// `pose`, in double; the renderer's alpha is clamp(0.5 - distance, 0, 1).
double signed_distance(const ShapeSpec& s, const Pose& pose, double x, double y) {
  const double dx = x - pose.cx, dy = y - pose.cy;
  const double c = det_cos(pose.theta), sn = det_sin(pose.theta);
  switch (s.kind) {
    case ShapeKind::Circle:
      return std::sqrt(dx * dx + dy * dy) - s.size;
    case ShapeKind::Rectangle:
      return std::max(std::fabs(c * dx + sn * dy) - s.size,
                      std::fabs(c * dy - sn * dx) - s.size * s.aspect);
    case ShapeKind::Triangle:
    default: {
      double most = -1e300;
      for (const auto& n : kTriangleNormals)
        most = std::max(most, (c * n[0] - sn * n[1]) * dx + (sn * n[0] + c * n[1]) * dy);
      return most - 0.5 * s.size;
    }
  }
}

// The topmost shape covering (x, y) at the poses given, and whether it covers it wholly (alpha
// 1); -1 when none covers it at all.
std::pair<int, bool> topmost(const ShapeScene& scene, const std::vector<Pose>& poses, double x,
                             double y) {
  for (int i = static_cast<int>(scene.shapes.size()) - 1; i >= 0; --i) {
    const double d = signed_distance(scene.shapes[static_cast<std::size_t>(i)],
                                     poses[static_cast<std::size_t>(i)], x, y);
    if (d < 0.5) return {i, d <= -0.5};
  }
  return {-1, false};
}

}  // namespace

void scene_anchor_map(const ShapeScene& scene, int64_t anchor, int64_t t, float* offsets,
                      float* valid, float* layer, float* motion) {
  const int64_t h = scene.height, w = scene.width;
  std::vector<Pose> now, then;
  for (const ShapeSpec& s : scene.shapes) {
    now.push_back(pose_of(s, h, w, t));
    then.push_back(pose_of(s, h, w, anchor));
  }
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const double px = static_cast<double>(x) + 0.5, py = static_cast<double>(y) + 0.5;
      const int64_t i = y * w + x;
      offsets[i] = offsets[h * w + i] = 0.0f;
      if (motion != nullptr) motion[i] = motion[h * w + i] = 0.0f;
      valid[i] = 0.0f;
      const auto [shape, whole] = topmost(scene, now, px, py);
      layer[i] = shape < 0 ? 0.0f : whole ? 1.0f : -1.0f;
      if (shape < 0) {  // background now: the same pixel of the anchor, if it shows background
        valid[i] = topmost(scene, then, px, py).first < 0 ? 1.0f : 0.0f;
        continue;
      }
      if (!whole) continue;  // an outline pixel: a mix of two contents
      // The same point of the shape at the anchor time: rotate back by the spin in between.
      const Pose& p = now[static_cast<std::size_t>(shape)];
      const Pose& a = then[static_cast<std::size_t>(shape)];
      const double turn = a.theta - p.theta, c = det_cos(turn), sn = det_sin(turn);
      const double dx = px - p.cx, dy = py - p.cy;
      const double qx = a.cx + c * dx - sn * dy, qy = a.cy + sn * dx + c * dy;
      if (qx < 0 || qy < 0 || qx > static_cast<double>(w) || qy > static_cast<double>(h)) continue;
      const auto [front, whole_then] = topmost(scene, then, qx, qy);
      if (front != shape || !whole_then) continue;  // hidden, or on its outline, back then
      offsets[i] = static_cast<float>(qx - px);
      offsets[h * w + i] = static_cast<float>(qy - py);
      valid[i] = 1.0f;
      if (motion != nullptr) {
        motion[i] = static_cast<float>(a.cx - p.cx);
        motion[h * w + i] = static_cast<float>(a.cy - p.cy);
      }
    }
}

Tensor render_scene(const ShapeScene& scene, int64_t t) {
  validate_scene(scene, "render_scene");
  MIXPREC_CHECK(t >= 0, "[render_scene] frame index must be >= 0, got ", t);
  Tensor hwc = Tensor::empty({scene.height, scene.width, 3});
  render_scene_hwc(scene, t, hwc.data<float>());
  return hwc.permute({2, 0, 1}).contiguous();
}

}  // namespace mixprec::data
