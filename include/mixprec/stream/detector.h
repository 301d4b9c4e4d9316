#pragma once
// Detector geometry for the streaming peak finder: how many panels, their pixel shape, and
// where each panel sits in the detector plane relative to the beam.
//
// Conventions (the ones CrystFEL and Cheetah use for raw, "slab" data):
//   - a frame is (panels, rows, cols) = (P, H, W), row = slow scan, col = fast scan;
//   - a position inside a panel is (x = col, y = row) in pixels, the centre of pixel (c, r)
//     at exactly (c, r) (Cheetah's/CXI convention; CrystFEL adds 0.5 on reading);
//   - the lab plane is in pixel units with the beam at (0, 0); panels are not rotated here,
//     only placed, so panel p's pixel (c, r) is at origin[p] + (c, r). Gaps between panels
//     are lab-plane space no pixel covers: light falling there is lost, as on a real detector.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec::stream {

struct PanelPlacement {
  double origin_x = 0;  // lab position of the centre of pixel (col 0, row 0)
  double origin_y = 0;
};

struct DetectorGeometry {
  std::string name;
  int64_t panels = 1, rows = 0, cols = 0;
  std::vector<PanelPlacement> placement;  // (P)

  int64_t pixels_per_panel() const { return rows * cols; }
  int64_t pixels() const { return panels * rows * cols; }
  // Distance from the beam of panel p's pixel (col, row), in pixels.
  double radius(int64_t panel, double col, double row) const;
  // radius() of every pixel: (P, H, W), what radial background statistics are binned by.
  std::vector<float> radius_map() const;
  // The largest radius of any pixel centre.
  double max_radius() const;
  // Throws Error when the shape or the placements are inconsistent.
  void validate() const;
};

// The detectors the synthetic generator knows, by name (detector_names() lists them):
//   single      one 352 x 384 panel (an ePix10k module), beam at its centre;
//   quad        4 x 352 x 384 in a 2 x 2 square around the beam;
//   epix10k2m   16 x 352 x 384 (LCLS ePix10k2M: four quadrants of 2 x 2 modules), uint16 raw;
//   jungfrau4m  8 x 512 x 1024 (PSI Jungfrau 4M: two columns of four modules).
// An unknown name throws Error listing the known ones.
DetectorGeometry detector_geometry(std::string_view name);
std::vector<std::string_view> detector_names();

// For frames that come without a geometry (a plain HDF5 file): every panel centred on the beam,
// so radial statistics are taken about each panel's own centre.
DetectorGeometry panel_centred_geometry(int64_t panels, int64_t rows, int64_t cols);

}  // namespace mixprec::stream
