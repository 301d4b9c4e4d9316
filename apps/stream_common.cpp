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
