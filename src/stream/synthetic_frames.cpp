#include "mixprec/stream/synthetic_frames.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"

namespace mixprec::stream {
namespace {

// What a Philox block is for: the fourth counter word holds (purpose << 24) | panel, so no two
// uses of the generator ever share a counter.
enum Purpose : uint32_t {
  kFrameParams = 1,
  kSpots = 2,
  kPixels = 3,
  kDefects = 4,
  kDeadColumns = 5,
};

std::array<uint32_t, 4> philox_block(uint64_t seed, int64_t frame, Purpose purpose, int64_t panel,
                                     uint32_t index) {
  const auto f = static_cast<uint64_t>(frame);
  return philox4x32_10({index, static_cast<uint32_t>(f), static_cast<uint32_t>(f >> 32),
                        (static_cast<uint32_t>(purpose) << 24) | static_cast<uint32_t>(panel)},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// In (0, 1): never 0 (log) and never 1.
double unit_open(uint32_t word) { return (static_cast<double>(word) + 0.5) * 0x1p-32; }

// Sequential draws of one (frame, purpose): for the few per-frame decisions made in order.
class DrawStream {
 public:
  DrawStream(uint64_t seed, int64_t frame, Purpose purpose)
      : seed_(seed), frame_(frame), purpose_(purpose) {}
  double uniform() {
    if (used_ == 4) {
      block_ = philox_block(seed_, frame_, purpose_, 0, next_block_++);
      used_ = 0;
    }
    return unit_open(block_[static_cast<std::size_t>(used_++)]);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  uint64_t seed_;
  int64_t frame_;
  Purpose purpose_;
  uint32_t next_block_ = 0;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
};

// Poisson(lambda) from one uniform by inversion (exact) for small means; above it a rounded
// normal with the same mean and variance, indistinguishable at these counts and O(1).
constexpr double kInversionLimit = 30;
int64_t poisson(double lambda, double u, double z) {
  if (lambda <= 0) return 0;
  if (lambda < kInversionLimit) {
    double p = std::exp(-lambda), cdf = p;
    int64_t k = 0;
    while (u > cdf && k < 1000) {
      ++k;
      p *= lambda / static_cast<double>(k);
      cdf += p;
    }
    return k;
  }
  return std::max<int64_t>(0, std::llround(lambda + std::sqrt(lambda) * z));
}

// The fraction of a unit Gaussian (centre mu, width sigma) that falls in pixel [i - 0.5, i + 0.5].
double pixel_fraction(double i, double mu, double sigma) {
  const double s = 1.0 / (sigma * std::numbers::sqrt2);
  return 0.5 * (std::erf((i + 0.5 - mu) * s) - std::erf((i - 0.5 - mu) * s));
}

}  // namespace

SyntheticDetector::SyntheticDetector(DetectorGeometry geometry, SyntheticConfig config,
                                     uint64_t seed)
    : geometry_(std::move(geometry)), config_(config), seed_(seed) {
  geometry_.validate();
  MIXPREC_CHECK(config_.gain_adu_per_photon > 0 && config_.read_noise_adu >= 0 &&
                    config_.saturation_adu > 0 && config_.saturation_adu <= 65535,
                "[synthetic] expected gain > 0, read noise >= 0 and saturation in [1, 65535]");
  // A spot is rendered over +-(5 sigma + 1) pixels through a 64-column table: sigma <= 5.
  MIXPREC_CHECK(config_.min_spot_sigma > 0 && config_.max_spot_sigma >= config_.min_spot_sigma &&
                    config_.max_spot_sigma <= 5 && config_.pixels_per_spot > 0,
                "[synthetic] expected 0 < min_spot_sigma <= max_spot_sigma <= 5 and pixels_per_spot > 0");
  const DetectorGeometry& g = geometry_;
  const auto n = static_cast<std::size_t>(g.pixels());
  const std::vector<float> radius = g.radius_map();
  std::vector<float> cos2_azimuth(n);
  bad_.assign(n, 0);
  hot_adu_.assign(n, 0);
  for (int64_t p = 0; p < g.panels; ++p) {
    const PanelPlacement& at = g.placement[static_cast<std::size_t>(p)];
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto i = static_cast<std::size_t>((p * g.rows + r) * g.cols + c);
        const double x = at.origin_x + static_cast<double>(c), y = at.origin_y + static_cast<double>(r);
        const double r2 = x * x + y * y;
        cos2_azimuth[i] = r2 > 0 ? static_cast<float>(x * x / r2) : 0.5f;
        const std::array<uint32_t, 4> w =
            philox_block(seed_, 0, kDefects, p, static_cast<uint32_t>(r * g.cols + c));
        const double u = unit_open(w[0]);
        if (u < config_.dead_pixel_fraction) {
          bad_[i] = 1;
        } else if (u < config_.dead_pixel_fraction + config_.hot_pixel_fraction) {
          bad_[i] = 1;
          hot_adu_[i] = static_cast<uint16_t>(
              std::min<double>(static_cast<double>(config_.saturation_adu),
                               1000 + unit_open(w[1]) * static_cast<double>(config_.saturation_adu)));
        }
      }
    const std::array<uint32_t, 4> col = philox_block(seed_, 0, kDeadColumns, p, 0);
    if (unit_open(col[0]) < config_.dead_column_probability) {
      const auto dead = static_cast<int64_t>(unit_open(col[1]) * static_cast<double>(g.cols));
      for (int64_t r = 0; r < g.rows; ++r) {
        const auto i = static_cast<std::size_t>((p * g.rows + r) * g.cols + dead);
        bad_[i] = 1;
        hot_adu_[i] = 0;
      }
    }
  }
  // The detector's scale: the smaller half-extent of the area the panels cover.
  double min_x = 1e300, max_x = -1e300, min_y = 1e300, max_y = -1e300;
  for (const PanelPlacement& at : g.placement) {
    min_x = std::min(min_x, at.origin_x);
    max_x = std::max(max_x, at.origin_x + static_cast<double>(g.cols));
    min_y = std::min(min_y, at.origin_y);
    max_y = std::max(max_y, at.origin_y + static_cast<double>(g.rows));
  }
  const double half = 0.5 * std::min(max_x - min_x, max_y - min_y);
  ring_radius_ = config_.ring_radius_fraction * half;
  ring_width_ = std::max(1.0, config_.ring_width_fraction * half);
  falloff_length_ = 0.5 * half;
  max_radius_ = std::max(1.0, g.max_radius());
  // The background's shape depends on the pixel only: computed once here, so a frame costs one
  // multiply-add per pixel for it instead of two exponentials.
  scatter_shape_.resize(n);
  ring_shape_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double r = radius[i], rel = r / max_radius_;
    const double polarisation = 1 - 0.15 * cos2_azimuth[i] * rel * rel;
    scatter_shape_[i] = static_cast<float>(
        (config_.air_scatter_photons + config_.centre_scatter_photons * std::exp(-r / falloff_length_)) *
        polarisation);
    const double ring_z = (r - ring_radius_) / ring_width_;
    ring_shape_[i] = static_cast<float>(config_.ring_photons * std::exp(-0.5 * ring_z * ring_z));
  }
}

void SyntheticDetector::place_spots(int64_t index, SyntheticFrame& frame, double strength,
                                    std::vector<double>& photons) const {
  const DetectorGeometry& g = geometry_;
  DrawStream draw(seed_, index, kSpots);
  const double mean_spots = static_cast<double>(g.pixels()) / config_.pixels_per_spot;
  const auto wanted = static_cast<int64_t>(std::llround(mean_spots * draw.uniform(0.5, 1.5)));
  std::vector<std::vector<std::size_t>> by_panel(static_cast<std::size_t>(g.panels));
  const double min_d2 = config_.min_spot_separation * config_.min_spot_separation;
  // Rejection keeps spots apart as a lattice does; a bounded number of tries, so a dense
  // request on a small detector yields fewer spots rather than a long loop.
  for (int64_t attempt = 0; attempt < 4 * wanted && static_cast<int64_t>(frame.peaks.size()) < wanted;
       ++attempt) {
    TruePeak s;
    s.panel = static_cast<int32_t>(
        std::min<double>(static_cast<double>(g.panels) - 1, draw.uniform() * static_cast<double>(g.panels)));
    s.x = static_cast<float>(draw.uniform() * static_cast<double>(g.cols) - 0.5);
    s.y = static_cast<float>(draw.uniform() * static_cast<double>(g.rows) - 0.5);
    s.sigma = static_cast<float>(draw.uniform(config_.min_spot_sigma, config_.max_spot_sigma));
    const double wilson = -std::log(draw.uniform());  // acentric intensities: exponential
    const double r = g.radius(s.panel, s.x, s.y) / max_radius_;
    const double spot_photons = config_.spot_photons * strength * wilson * std::exp(-2 * r * r);
    std::vector<std::size_t>& mine = by_panel[static_cast<std::size_t>(s.panel)];
    bool clear = true;
    for (std::size_t j : mine) {
      const double dx = frame.peaks[j].x - s.x, dy = frame.peaks[j].y - s.y;
      if (dx * dx + dy * dy < min_d2) {
        clear = false;
        break;
      }
    }
    if (!clear) continue;
    mine.push_back(frame.peaks.size());
    frame.peaks.push_back(s);
    photons.push_back(spot_photons);
  }
}

void SyntheticDetector::generate(int64_t index, SyntheticFrame& frame) const {
  MIXPREC_CHECK(index >= 0, "[synthetic] frame index must be >= 0, got ", index);
  const DetectorGeometry& g = geometry_;
  const int64_t n = g.pixels();
  frame.index = index;
  frame.adu.resize(static_cast<std::size_t>(n));
  frame.expected_photons.resize(static_cast<std::size_t>(n));
  frame.peaks.clear();

  DrawStream params(seed_, index, kFrameParams);
  const double beam = params.uniform(0.8, 1.2);  // shot-to-shot pulse energy
  const double jet = params.uniform(0.5, 1.5);   // liquid-jet thickness: the ring's strength
  const bool hit = params.uniform() < config_.hit_fraction;
  const double strength = std::exp(params.uniform(std::log(0.3), std::log(3.0)));  // crystal size
  std::vector<double> photons;  // per spot, in frame.peaks order until the final sort
  if (hit) place_spots(index, frame, strength, photons);

  float* expected = frame.expected_photons.data();
  const int64_t total_rows = g.panels * g.rows;
  // Background first (per pixel, split by rows), then the spots on top (split by panels).
  parallel_for(0, total_rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto i = static_cast<std::size_t>(row * g.cols + c);
        expected[i] = static_cast<float>(beam * scatter_shape_[i] + jet * ring_shape_[i]);
      }
  });
  const double read_photons = config_.read_noise_adu / config_.gain_adu_per_photon;
  parallel_for(0, g.panels, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      float* panel = expected + p * g.pixels_per_panel();
      for (std::size_t spot = 0; spot < frame.peaks.size(); ++spot) {
        TruePeak& s = frame.peaks[spot];
        if (s.panel != p) continue;
        const double spot_photons = photons[spot];
        const int64_t reach = static_cast<int64_t>(std::ceil(5 * s.sigma)) + 1;
        const int64_t c0 = std::max<int64_t>(0, std::llround(s.x) - reach);
        const int64_t c1 = std::min<int64_t>(g.cols - 1, std::llround(s.x) + reach);
        const int64_t r0 = std::max<int64_t>(0, std::llround(s.y) - reach);
        const int64_t r1 = std::min<int64_t>(g.rows - 1, std::llround(s.y) + reach);
        const double background =
            panel[std::clamp<int64_t>(std::llround(s.y), 0, g.rows - 1) * g.cols +
                  std::clamp<int64_t>(std::llround(s.x), 0, g.cols - 1)];
        std::array<double, 64> fx{};  // 2 * reach + 1 <= 2 * (25 + 2) + 1 columns (sigma <= 5)
        const int64_t width = std::min<int64_t>(c1 - c0 + 1, static_cast<int64_t>(fx.size()));
        for (int64_t k = 0; k < width; ++k)
          fx[static_cast<std::size_t>(k)] = pixel_fraction(static_cast<double>(c0 + k), s.x, s.sigma);
        double deposited = 0;
        for (int64_t r = r0; r <= r1; ++r) {
          const double fy = pixel_fraction(static_cast<double>(r), s.y, s.sigma);
          for (int64_t k = 0; k < width; ++k) {
            const double add = spot_photons * fy * fx[static_cast<std::size_t>(k)];
            panel[r * g.cols + c0 + k] += static_cast<float>(add);
            deposited += add;
          }
        }
        const double noise_area = 4 * std::numbers::pi * s.sigma * s.sigma;
        const double b = (background + read_photons * read_photons) * noise_area;
        s.intensity_adu = static_cast<float>(deposited * config_.gain_adu_per_photon);
        s.snr = deposited > 0 ? static_cast<float>(deposited / std::sqrt(deposited + b)) : 0.0f;
      }
    }
  });

  std::stable_sort(frame.peaks.begin(), frame.peaks.end(),
                   [](const TruePeak& a, const TruePeak& b) { return a.panel < b.panel; });

  const double gain = config_.gain_adu_per_photon, read = config_.read_noise_adu;
  const auto saturation = static_cast<double>(config_.saturation_adu);
  uint16_t* out = frame.adu.data();
  parallel_for(0, total_rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t p = row / g.rows;
      const int64_t panel_row = row % g.rows;
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto i = static_cast<std::size_t>(row * g.cols + c);
        if (bad_[i]) {
          out[i] = hot_adu_[i];
          continue;
        }
        const std::array<uint32_t, 4> w =
            philox_block(seed_, index, kPixels, p, static_cast<uint32_t>(panel_row * g.cols + c));
        // Box-Muller from words 2-3: z1 for the read noise, z2 (only when a mean is large
        // enough to need it) for the Poisson's normal approximation.
        const double radius = std::sqrt(-2 * std::log(unit_open(w[2])));
        const double angle = 2 * std::numbers::pi * unit_open(w[3]);
        const double z1 = radius * std::cos(angle);
        const double lambda = expected[i];
        const double z2 = lambda < kInversionLimit ? 0.0 : radius * std::sin(angle);
        const int64_t photons = poisson(lambda, unit_open(w[0]), z2);
        const double adu = std::nearbyint(gain * static_cast<double>(photons) + read * z1);
        out[i] = static_cast<uint16_t>(std::clamp(adu, 0.0, saturation));
      }
    }
  });
}

}  // namespace mixprec::stream
