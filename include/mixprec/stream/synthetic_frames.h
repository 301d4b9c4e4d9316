#pragma once
// Synthetic X-ray detector frames with known Bragg peaks: the data the peak finders are tested
// and (later) trained on, bit-identical for a given (seed, frame index) on any machine and any
// thread count.
//
// The model, per pixel, in photons (an expected count, then Poisson noise):
//   background = beam * (air scatter: a + b * exp(-radius / L)) * polarisation(azimuth)
//              + jet * water ring (a Gaussian in radius at ~0.55 of the detector half-size)
//   + Bragg spots: 2-D Gaussians integrated over each pixel (erf), of varying width
//     (sigma 0.6-1.4 px) and intensity (Wilson statistics: exponential, fading with radius);
// then ADU = round(gain * Poisson(expected) + Normal(0, read noise)), clipped to [0, saturation]
// (a calibrated, pedestal-subtracted integrating detector, stored as uint16).
// Static detector defects, the same in every frame of a seed: dead pixels (0), hot pixels (a
// high, steady value) and the odd dead column, all marked in bad_pixel_mask().
// Frames vary: beam intensity and jet thickness jitter, the spot count (a hit fraction; the
// misses have no spots), a per-frame crystal strength.
//
// Determinism: every random number is one Philox4x32-10 block (core/random.h) addressed by
// (seed; frame, purpose, panel, pixel or draw index), never a sequential stream shared across
// pixels, so frame i does not depend on frames before it and the result does not depend on
// how the panels are split across threads. All float math is plain scalar code built without
// contraction (the data layer's rule), so the bits match across ISA levels.
#include <cstdint>
#include <vector>

#include "mixprec/stream/detector.h"

namespace mixprec::stream {

struct SyntheticConfig {
  double gain_adu_per_photon = 10;  // integrating detector gain
  double read_noise_adu = 2;        // electronic noise, Gaussian
  int64_t saturation_adu = 65535;   // uint16 full scale
  double air_scatter_photons = 0.4;     // flat part of the background, per pixel
  double centre_scatter_photons = 1.2;  // extra background at the beam, fading outward
  double ring_photons = 2.0;            // water-ring peak height, per pixel
  double ring_radius_fraction = 0.55;   // of the detector's half-size (its smaller half-extent)
  double ring_width_fraction = 0.05;    // Gaussian sigma of the ring, same unit
  double hit_fraction = 0.9;            // frames with spots; the rest are misses
  double pixels_per_spot = 3000;        // spot density on a hit
  double spot_photons = 400;            // mean integrated spot intensity at the centre
  double min_spot_sigma = 0.6, max_spot_sigma = 1.4;  // spot widths, pixels
  double min_spot_separation = 6;       // pixels between spot centres (lattice spacing)
  double dead_pixel_fraction = 2e-4;
  double hot_pixel_fraction = 1e-4;
  double dead_column_probability = 0.15;  // per panel
};

// One Bragg spot as generated.
struct TruePeak {
  int32_t panel = 0;
  float x = 0, y = 0;       // panel pixel coordinates: x = col (fast scan), y = row (slow scan)
  float intensity_adu = 0;  // expected integrated signal on its panel, ADU, background excluded
  float sigma = 0;          // Gaussian width, pixels
  // Expected signal-to-noise of the integrated spot: S / sqrt(S + B), S its photons, B the
  // background (plus read noise) photons over 4 pi sigma^2 pixels, the Gaussian's noise-
  // equivalent area. Finders are judged on spots above a stated SNR.
  float snr = 0;
};

struct SyntheticFrame {
  int64_t index = -1;
  std::vector<uint16_t> adu;              // (P, H, W) the detector's values
  std::vector<float> expected_photons;    // (P, H, W) the noiseless image, before defects
  std::vector<TruePeak> peaks;            // in panel order, then generation order
};

class SyntheticDetector {
 public:
  SyntheticDetector(DetectorGeometry geometry, SyntheticConfig config, uint64_t seed);

  const DetectorGeometry& geometry() const { return geometry_; }
  const SyntheticConfig& config() const { return config_; }
  uint64_t seed() const { return seed_; }
  // (P, H, W): 1 for a dead or hot pixel, else 0. The same for every frame.
  const std::vector<uint8_t>& bad_pixel_mask() const { return bad_; }

  // Fills `frame` (its buffers are reused across calls). Safe to call from several threads on
  // distinct frames; parallel over panels and rows inside.
  void generate(int64_t index, SyntheticFrame& frame) const;

 private:
  // Positions, widths and photons (into `photons`, one per spot) of a hit's spots.
  void place_spots(int64_t index, SyntheticFrame& frame, double strength,
                   std::vector<double>& photons) const;

  DetectorGeometry geometry_;
  SyntheticConfig config_;
  uint64_t seed_;
  std::vector<uint8_t> bad_;       // (P, H, W)
  std::vector<uint16_t> hot_adu_;  // (P, H, W) the steady value of a hot pixel, 0 elsewhere
  std::vector<float> scatter_shape_;  // (P, H, W) air scatter x polarisation, photons at beam 1
  std::vector<float> ring_shape_;     // (P, H, W) the water ring, photons at jet 1
  double ring_radius_ = 0, ring_width_ = 0, falloff_length_ = 0, max_radius_ = 0;
};

}  // namespace mixprec::stream
