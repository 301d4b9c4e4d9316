#include "mixprec/stream/detector.h"

#include <algorithm>
#include <cmath>

#include "mixprec/core/error.h"

namespace mixprec::stream {
namespace {

// Panels of rows x cols in a grid_cols x grid_rows grid centred on the beam. `gap` separates
// neighbouring panels; every second gap is widened by `group_gap` (the quadrant boundaries of
// an ePix10k2M, the central slit of a Jungfrau 4M).
DetectorGeometry grid_geometry(std::string name, int64_t rows, int64_t cols, int grid_cols,
                               int grid_rows, double gap, double group_gap) {
  DetectorGeometry g;
  g.name = std::move(name);
  g.panels = static_cast<int64_t>(grid_cols) * grid_rows;
  g.rows = rows;
  g.cols = cols;
  auto starts = [&](int count, double size) {
    std::vector<double> at(static_cast<std::size_t>(count));
    double pos = 0;
    for (int i = 0; i < count; ++i) {
      at[static_cast<std::size_t>(i)] = pos;
      pos += size + gap + ((i % 2 == 1) ? group_gap : 0.0);
    }
    const double extent = at.back() + size;
    for (double& a : at) a -= extent / 2;  // centred: the beam falls in the middle gap
    return at;
  };
  const std::vector<double> xs = starts(grid_cols, static_cast<double>(cols));
  const std::vector<double> ys = starts(grid_rows, static_cast<double>(rows));
  for (int gy = 0; gy < grid_rows; ++gy)
    for (int gx = 0; gx < grid_cols; ++gx)
      // +0.5: the placement is of the pixel's centre, the grid of its outer edge.
      g.placement.push_back({xs[static_cast<std::size_t>(gx)] + 0.5,
                             ys[static_cast<std::size_t>(gy)] + 0.5});
  return g;
}

}  // namespace

double DetectorGeometry::radius(int64_t panel, double col, double row) const {
  const PanelPlacement& p = placement[static_cast<std::size_t>(panel)];
  return std::hypot(p.origin_x + col, p.origin_y + row);
}

std::vector<float> DetectorGeometry::radius_map() const {
  std::vector<float> map(static_cast<std::size_t>(pixels()));
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        map[static_cast<std::size_t>((p * rows + r) * cols + c)] =
            static_cast<float>(radius(p, static_cast<double>(c), static_cast<double>(r)));
  return map;
}

double DetectorGeometry::max_radius() const {
  double best = 0;
  for (int64_t p = 0; p < panels; ++p)
    for (double r : {0.0, static_cast<double>(rows - 1)})
      for (double c : {0.0, static_cast<double>(cols - 1)}) best = std::max(best, radius(p, c, r));
  return best;
}

void DetectorGeometry::validate() const {
  MIXPREC_CHECK(panels >= 1 && rows >= 1 && cols >= 1,
                "[detector] ", name, ": expected at least one panel of at least 1 x 1 pixels, got ",
                panels, " x ", rows, " x ", cols);
  MIXPREC_CHECK(static_cast<int64_t>(placement.size()) == panels, "[detector] ", name, ": ",
                placement.size(), " panel placements for ", panels, " panels");
  for (const PanelPlacement& p : placement)
    MIXPREC_CHECK(std::isfinite(p.origin_x) && std::isfinite(p.origin_y), "[detector] ", name,
                  ": a panel placement is not finite");
}

DetectorGeometry detector_geometry(std::string_view name) {
  if (name == "single") return grid_geometry("single", 352, 384, 1, 1, 0, 0);
  if (name == "quad") return grid_geometry("quad", 352, 384, 2, 2, 8, 0);
  if (name == "epix10k2m") return grid_geometry("epix10k2m", 352, 384, 4, 4, 4, 24);
  if (name == "jungfrau4m") return grid_geometry("jungfrau4m", 512, 1024, 2, 4, 8, 28);
  std::string known;
  for (std::string_view n : detector_names()) known += (known.empty() ? "" : ", ") + std::string(n);
  throw Error("[detector] unknown detector '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<std::string_view> detector_names() {
  return {"single", "quad", "epix10k2m", "jungfrau4m"};
}

DetectorGeometry panel_centred_geometry(int64_t panels, int64_t rows, int64_t cols) {
  DetectorGeometry g;
  g.name = "panel-centred";
  g.panels = panels;
  g.rows = rows;
  g.cols = cols;
  g.placement.assign(static_cast<std::size_t>(std::max<int64_t>(panels, 0)),
                     {-(static_cast<double>(cols) - 1) / 2, -(static_cast<double>(rows) - 1) / 2});
  g.validate();
  return g;
}

}  // namespace mixprec::stream
