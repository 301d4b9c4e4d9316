#pragma once
// ShapeScene: one procedural video as data (a background and a few moving shapes) and the
// renderer that turns it into frames. MovingShapes (moving_shapes.h) draws scenes at random
// from a seed; tests and tools can also build a scene by hand (an occlusion case, a demo).
//
// Geometry: pixel (row y, column x) covers [x, x+1) x [y, y+1); its colour is sampled at the
// centre (x + 0.5, y + 0.5). x grows to the right, y downwards, angles are in radians.
//
// Motion is closed-form, so frame t costs the same for t = 0 and t = 10^6 and every frame is
// a pure function of (scene, t):
//   - a shape's centre moves at constant velocity and bounces off the borders: each
//     coordinate is folded into [r, extent - r] by a triangle wave, r = the shape's
//     circumradius, so the shape stays inside the frame whatever its rotation;
//   - it spins at constant angular velocity.
// Shapes are painted back to front in the order of ShapeScene::shapes (later ones occlude
// earlier ones), with anti-aliased edges: coverage = clamp(0.5 - d, 0, 1) where d is the
// signed distance (pixels) from the pixel centre to the edge, the linear approximation of a
// box filter's coverage across a straight edge.
//
// Determinism: only IEEE +, -, *, /, sqrt and floor, with our own sine and cosine (libm's
// differ between implementations) and the sources compiled with -ffp-contract=off, so every
// machine and compiler gives the same bits.
//
// Cost: the background costs a few flops per pixel; each shape only visits its bounding box:
// O(pixels x shapes) in the worst case.
#include <array>
#include <cstdint>
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::data {

enum class ShapeKind : uint8_t { Circle, Rectangle, Triangle };
inline constexpr int kNumShapeKinds = 3;

struct ShapeSpec {
  ShapeKind kind = ShapeKind::Circle;
  double x = 0, y = 0;    // centre at t = 0 (pixels); folded into the bounce range
  double vx = 0, vy = 0;  // pixels per frame
  double angle = 0;       // at t = 0
  double spin = 0;        // radians per frame
  // Circle: radius. Rectangle: half-width (half-height = size * aspect). Triangle
  // (equilateral): circumradius. Pixels, > 0.
  double size = 8;
  double aspect = 1;                    // rectangles only; 1 is a square
  std::array<float, 3> color{1, 1, 1};  // linear RGB in [0, 1]
  // A linear brightness ramp across the shape along its rotated x axis (colour times
  // 1 +- shading at the rim, clamped to [0, 1]): makes a spinning circle visibly spin.
  float shading = 0;
};

enum class PatternKind : uint8_t { None, Stripes, Checks };

struct Background {
  // A linear gradient from color0 to color1 along direction gradient_angle, spanning the frame.
  std::array<float, 3> color0{0.5f, 0.5f, 0.5f};
  std::array<float, 3> color1{0.5f, 0.5f, 0.5f};
  double gradient_angle = 0;
  // Plus a smooth low-frequency pattern (a smoothed triangle wave: no hard edges, so it is
  // easy for a small model): pattern_amplitude * (wave - 0.5) added to every channel.
  PatternKind pattern = PatternKind::None;
  double pattern_period = 16;  // pixels, > 0
  double pattern_angle = 0;
  float pattern_amplitude = 0;
};

struct ShapeScene {
  int64_t height = 64, width = 64;
  Background background{};
  std::vector<ShapeSpec> shapes{};  // back to front
};

// Throws mixprec::Error naming `op` if the scene cannot be rendered (sizes, finite values).
void validate_scene(const ShapeScene& scene, const char* op = "render_scene");

// The circumradius of a shape: the radius of a disc that holds it at any rotation.
double shape_bound_radius(const ShapeSpec& shape);

// How far a shape reaches from its centre at frame t (its rotation then), in pixels, on each side.
struct ShapeExtent {
  double left = 0, right = 0, top = 0, bottom = 0;
};
ShapeExtent shape_extent(const ShapeSpec& shape, int64_t t);

// Centres of `shape` at frames 0 .. frames - 1, in pixels: {x, y}. A shape bounces off a wall
// where its edge meets it (a visible contact, for every kind and rotation): each frame it moves by
// its velocity, and an axis whose edge crossed a wall is reflected off it. Frame 0 folds the
// spec's centre into the room its extent leaves.
std::vector<std::array<double, 2>> shape_track(const ShapeSpec& shape, int64_t height,
                                               int64_t width, int64_t frames);
// Centre of `shape` at frame t >= 0: shape_track(...)[t], in O(t) time and no memory (the motion
// is simulated).
std::array<double, 2> shape_position(const ShapeSpec& shape, int64_t height, int64_t width,
                                     int64_t t);

// Renders frame t (>= 0) into `out`, height * width * 3 floats laid out (y, x, channel), each
// value in [-1, 1] (colour c in [0, 1] maps to 2c - 1). The scene must be valid; no checks.
void render_scene_hwc(const ShapeScene& scene, int64_t t, float* out);

// Frame t as a [3, height, width] f32 tensor in [-1, 1]. Validates the scene.
Tensor render_scene(const ShapeScene& scene, int64_t t);

// The true anchor map of frame t with respect to frame `anchor` of the same scene: where each
// pixel's content is in the anchor frame, as an offset from the pixel (pixels; x, then y), the
// displacement an anchor-map model reads its frame through (models::anchor_map_frame). Defined
// (valid 1) for a pixel whose centre is wholly inside its topmost shape at t and whose content is
// wholly inside that shape, and in front, at the anchor time: the shape's rigid motion, its spin
// included; and for a pixel that is background in both frames: 0. Elsewhere (outlines, content
// hidden or outside the frame at the anchor time) valid is 0 and the offset 0. `layer` says what
// each pixel is at t: 1 wholly inside a shape, 0 background, -1 an outline (a mix). `offsets`
// holds 2 * height * width floats ([2, H, W]), `valid` and `layer` height * width each. The scene
// must be valid. `motion` (2 * height * width floats, optional) receives, where the offset of a
// shape's pixel is defined, the offset of its shape's centre: the translation alone, without the
// spin (0 elsewhere). Which way a shape travels, whatever part of it a pixel shows.
void scene_anchor_map(const ShapeScene& scene, int64_t anchor, int64_t t, float* offsets,
                      float* valid, float* layer, float* motion = nullptr);

// Deterministic sine and cosine (double, error < 1e-15 for |x| < 1e6): the same bits on
// every machine, unlike libm's.
double det_sin(double x);
double det_cos(double x);

}  // namespace mixprec::data
