#pragma once
// What `stream peaks` and `stream run` share: the detector side of a frame file (geometry,
// bad pixels, ground truth) and the scoring fields of their JSON summaries.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli_args.h"
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

// The options `stream peaks` and `stream run` share, declared once so they read the same in
// both: --input, --output and --max-frames of a frame file into a CXI file, and the scoring.
struct FrameFileOptions {
  std::string input, output;
  int64_t max_frames = 0;  // 0: all
  ScoringOptions scoring;
};
void add_frame_file_options(ArgParser& p, FrameFileOptions& options);
// --match-radius must be > 0 (an open end, which a Range cannot say): a UsageError otherwise.
void check_frame_file_options(std::string_view command, const FrameFileOptions& options);

// The scoring fields of a summary, without braces: "\"ground_truth\": false, \"f1\": null"
// without truth, else F1, precision, recall, the counts, the mean error and the settings.
std::string scoring_json(bool has_truth, const stream::MatchCounts& score,
                         const ScoringOptions& options);

// A bound endpoint ("tcp://127.0.0.1:41234") and a newline into `path`, atomically, so a
// script waiting for the file never reads half of it (--endpoint-file).
void write_endpoint_file(const std::string& path, const std::string& endpoint);

}  // namespace mixprec::app
