#pragma once
// Scoring a peak finder against the generator's ground truth: detections and true spots on the
// same panel are paired one to one, closest pairs first, within a match radius (1.5 px by the
// issue's rule). Spots below `min_truth_snr` are "don't care": finding one is not a false
// positive and missing one is not a false negative (a finder is judged on spots it could see).
#include <cstdint>
#include <span>

#include "mixprec/stream/peaks.h"
#include "mixprec/stream/synthetic_frames.h"

namespace mixprec::stream {

struct MatchCounts {
  int64_t true_positives = 0;
  int64_t false_positives = 0;
  int64_t false_negatives = 0;
  int64_t ignored = 0;         // detections matched to a spot below min_truth_snr
  double distance_sum = 0;     // over true positives, pixels

  double precision() const;    // 1 when nothing was found
  double recall() const;       // 1 when there was nothing to find
  double f1() const;
  double mean_distance() const;  // 0 without true positives
  MatchCounts& operator+=(const MatchCounts& other);
};

MatchCounts match_peaks(std::span<const Peak> found, std::span<const TruePeak> truth,
                        double radius = 1.5, double min_truth_snr = 0);

}  // namespace mixprec::stream
