#pragma once
// The machinery both peak finders share (peaks.h, classic_finder.h): 8-connected components of
// selected pixels in one panel, and a component's measurement against its local background.
#include <cmath>
#include <cstdint>
#include <vector>

#include "mixprec/stream/peaks.h"

namespace mixprec::stream::detail {

// One panel of a frame and the pixels that take part.
struct PanelPixels {
  const float* values = nullptr;     // (H, W)
  const uint8_t* selected = nullptr; // (H, W) nonzero: part of some peak
  const uint8_t* bad = nullptr;      // (H, W) nonzero: ignore, or nullptr
  int64_t rows = 0, cols = 0;
};

// Scratch reused across panels and frames: no allocation per component.
struct ComponentScratch {
  std::vector<uint8_t> visited;  // (H, W)
  std::vector<int32_t> stack, pixels, ring;
  std::vector<float> ring_values;
};

// Calls visit(pixels) for every 8-connected component of selected, good, finite pixels, in raster
// order of each component's first pixel. `pixels` holds flat indices into the panel.
template <typename Visit>
void for_each_component(const PanelPixels& panel, ComponentScratch& scratch, Visit&& visit) {
  const int64_t rows = panel.rows, cols = panel.cols, n = rows * cols;
  scratch.visited.assign(static_cast<std::size_t>(n), 0);
  // Non-finite values (a broken calibration) join no peak: they would make its sums NaN.
  auto take = [&](int64_t i) {
    return panel.selected[i] && !(panel.bad && panel.bad[i]) && std::isfinite(panel.values[i]) &&
           !scratch.visited[static_cast<std::size_t>(i)];
  };
  for (int64_t start = 0; start < n; ++start) {
    if (!take(start)) continue;
    scratch.pixels.clear();
    scratch.stack.assign(1, static_cast<int32_t>(start));
    scratch.visited[static_cast<std::size_t>(start)] = 1;
    while (!scratch.stack.empty()) {
      const int32_t i = scratch.stack.back();
      scratch.stack.pop_back();
      scratch.pixels.push_back(i);
      const int64_t r = i / cols, c = i % cols;
      for (int64_t dr = -1; dr <= 1; ++dr)
        for (int64_t dc = -1; dc <= 1; ++dc) {
          const int64_t rr = r + dr, cc = c + dc;
          if ((dr == 0 && dc == 0) || rr < 0 || rr >= rows || cc < 0 || cc >= cols) continue;
          const int64_t j = rr * cols + cc;
          if (!take(j)) continue;
          scratch.visited[static_cast<std::size_t>(j)] = 1;
          scratch.stack.push_back(static_cast<int32_t>(j));
        }
    }
    visit(scratch.pixels);
  }
}

// Measures the component `pixels` of `panel` (see peaks.h for the background ring).
Peak measure_component(const PanelPixels& panel, int32_t panel_index,
                       const std::vector<int32_t>& pixels, int64_t background_margin,
                       ComponentScratch& scratch);

}  // namespace mixprec::stream::detail
