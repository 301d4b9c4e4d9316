#pragma once
// Bragg peaks from a per-pixel mask: what follows the segmentation network (its argmax mask)
// and, with a threshold mask, the classical finder (classic_finder.h).
//
// mask -> 8-connected components per panel (peaks never cross a panel edge: panels are not
// neighbours in the lab) -> per component: intensity-weighted centre of mass, total intensity
// above the local background, pixel count, maximum value, local SNR. The local background is
// a square ring around the component's bounding box (`background_margin` pixels wide, starting
// one pixel out so the spot's own tails stay out of it), over pixels that are neither masked nor
// bad, its mean taken after one 3-sigma clip so a neighbouring spot does not raise it.
#include <cstdint>
#include <vector>

namespace mixprec::stream {

struct Peak {
  int32_t panel = 0;
  float x = 0, y = 0;          // panel pixel coordinates (x = col, y = row; pixel centres at integers)
  float total_intensity = 0;   // sum over the peak's pixels of (value - local background)
  int32_t n_pixels = 0;
  float max_value = 0;         // the largest raw value among its pixels
  float background = 0;        // local background per pixel (ring mean)
  float background_sigma = 0;  // its standard deviation
  float snr = 0;               // total_intensity / (background_sigma * sqrt(n_pixels))
};

// A frame of P panels of rows x cols, f32 (the finders' working precision).
struct FrameView {
  const float* data = nullptr;  // (P, H, W)
  int64_t panels = 1, rows = 0, cols = 0;
};

struct MaskPeakOptions {
  int64_t min_pixels = 1;
  // A component smaller than min_pixels is still a peak when its SNR (Peak::snr) reaches this;
  // 0: never. A sharp, strong spot can light one or two pixels, as stray pixels do.
  double small_peak_snr = 0;
  int64_t max_pixels = 0;      // 0: no limit
  double min_intensity = 0;    // background-subtracted total, same unit as the frame
  int64_t background_margin = 3;
};

// `peak_mask`: (P, H, W), nonzero marks a peak pixel. `bad_pixels`: (P, H, W) nonzero marks a
// pixel to ignore, or nullptr. Peaks come in panel order, then raster order of their first pixel.
std::vector<Peak> extract_peaks(const FrameView& frame, const uint8_t* peak_mask,
                                const uint8_t* bad_pixels, const MaskPeakOptions& options = {});

}  // namespace mixprec::stream
