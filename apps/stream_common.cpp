#include "stream_common.h"

#include "mixprec/io/atomic_file.h"
#include "mixprec/io/json.h"

namespace mixprec::app {

DetectorSetup detector_setup(const stream::Hdf5FrameReader& reader) {
  DetectorSetup setup;
  const std::optional<stream::DetectorGeometry> stored = reader.geometry();
  setup.geometry =
      stored ? *stored
             : stream::panel_centred_geometry(reader.panels(), reader.rows(), reader.cols());
  setup.bad_pixels = reader.bad_pixel_mask();
  setup.truth = reader.ground_truth();
  return setup;
}

void add_frame_file_options(ArgParser& p, FrameFileOptions& o) {
  p.option("--input", &o.input, "FILE.h5, or FILE.h5:/dataset (default /entry_1/data_1/data)");
  p.option("--output", &o.output, "CXI file to write (appears complete, or not at all)");
  p.option("--max-frames", &o.max_frames, "stop after this many frames (0: all)", {.min = 0});
  p.option("--match-radius", &o.scoring.match_radius,
           "scoring: a found peak matches a true one within this (px)");
  p.option("--min-truth-snr", &o.scoring.min_truth_snr,
           "scoring: weaker true peaks are neither required nor false", {.min = 0});
}

void check_frame_file_options(std::string_view command, const FrameFileOptions& o) {
  if (!(o.scoring.match_radius > 0))
    throw UsageError{std::string(command) + ": --match-radius must be > 0"};
}

std::string scoring_json(bool has_truth, const stream::MatchCounts& score,
                         const ScoringOptions& options) {
  using io::json_number;
  if (!has_truth) return "\"ground_truth\": false, \"f1\": null";
  return "\"ground_truth\": true, \"f1\": " + json_number(score.f1(), 5) +
         ", \"precision\": " + json_number(score.precision(), 5) +
         ", \"recall\": " + json_number(score.recall(), 5) +
         ", \"true_positives\": " + std::to_string(score.true_positives) +
         ", \"false_positives\": " + std::to_string(score.false_positives) +
         ", \"false_negatives\": " + std::to_string(score.false_negatives) +
         ", \"weak_found\": " + std::to_string(score.ignored) +
         ", \"mean_error_px\": " + json_number(score.mean_distance(), 4) +
         ", \"match_radius\": " + json_number(options.match_radius) +
         ", \"min_truth_snr\": " + json_number(options.min_truth_snr);
}

void write_endpoint_file(const std::string& path, const std::string& endpoint) {
  io::AtomicFile out(path);
  const std::string text = endpoint + "\n";
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace mixprec::app
