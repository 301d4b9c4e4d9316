#pragma once
// What `stream peaks` and `stream run` share: the detector side of a frame file (geometry,
// bad pixels, ground truth) and the scoring fields of their JSON summaries.
#include <optional>
#include <string>
#include <vector>

#include "mixprec/stream/detector.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/peak_matching.h"

namespace mixprec::app {

using TruthLists = std::vector<std::vector<stream::TruePeak>>;  // (N frames) true peaks

// The detector a frame file describes. A file without a stored geometry gets panels centred
// on the beam, which is what a single-panel file without metadata means.
struct DetectorSetup {
  stream::DetectorGeometry geometry;
  std::vector<uint8_t> bad_pixels;  // (P, H, W) 1 = bad, empty when the file has no mask
  std::optional<TruthLists> truth;  // when the file has ground truth (synthetic files)
};
DetectorSetup detector_setup(const stream::Hdf5FrameReader& reader);

struct ScoringOptions {
  double match_radius = 1.5;  // px: a found peak matches a true one within this
  double min_truth_snr = 8;   // weaker true peaks are neither required nor counted false
};

// The scoring fields of a summary, without braces: "\"ground_truth\": false, \"f1\": null"
// without truth, else F1, precision, recall, the counts, the mean error and the settings.
std::string scoring_json(bool has_truth, const stream::MatchCounts& score,
                         const ScoringOptions& options);

// A bound endpoint ("tcp://127.0.0.1:41234") and a newline into `path`, atomically, so a
// script waiting for the file never reads half of it (--endpoint-file).
void write_endpoint_file(const std::string& path, const std::string& endpoint);

}  // namespace mixprec::app
