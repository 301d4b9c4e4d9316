#include "mixprec/stream/peak_matching.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::stream {

double MatchCounts::precision() const {
  const int64_t n = true_positives + false_positives;
  return n == 0 ? 1.0 : static_cast<double>(true_positives) / static_cast<double>(n);
}

double MatchCounts::recall() const {
  const int64_t n = true_positives + false_negatives;
  return n == 0 ? 1.0 : static_cast<double>(true_positives) / static_cast<double>(n);
}

double MatchCounts::f1() const {
  const double p = precision(), r = recall();
  return p + r == 0 ? 0.0 : 2 * p * r / (p + r);
}

double MatchCounts::mean_distance() const {
  return true_positives == 0 ? 0.0 : distance_sum / static_cast<double>(true_positives);
}

MatchCounts& MatchCounts::operator+=(const MatchCounts& o) {
  true_positives += o.true_positives;
  false_positives += o.false_positives;
  false_negatives += o.false_negatives;
  ignored += o.ignored;
  distance_sum += o.distance_sum;
  return *this;
}

MatchCounts match_peaks(std::span<const Peak> found, std::span<const TruePeak> truth, double radius,
                        double min_truth_snr) {
  MIXPREC_CHECK(radius > 0, "[match_peaks] radius must be > 0, got ", radius);
  struct Pair {
    double distance;
    std::size_t found, truth;
  };
  std::vector<Pair> pairs;
  const double r2 = radius * radius;
  // Peaks and truths both come in panel order; a quadratic scan per panel is fine at a few
  // thousand spots a frame.
  for (std::size_t f = 0; f < found.size(); ++f)
    for (std::size_t t = 0; t < truth.size(); ++t) {
      if (found[f].panel != truth[t].panel) continue;
      const double dx = found[f].x - truth[t].x, dy = found[f].y - truth[t].y;
      const double d2 = dx * dx + dy * dy;
      if (d2 <= r2) pairs.push_back({std::sqrt(d2), f, t});
    }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) {
    return a.distance != b.distance ? a.distance < b.distance
                                    : (a.found != b.found ? a.found < b.found : a.truth < b.truth);
  });
  std::vector<uint8_t> found_used(found.size(), 0), truth_used(truth.size(), 0);
  MatchCounts counts;
  for (const Pair& pair : pairs) {
    if (found_used[pair.found] || truth_used[pair.truth]) continue;
    found_used[pair.found] = truth_used[pair.truth] = 1;
    if (truth[pair.truth].snr < min_truth_snr) {
      ++counts.ignored;
    } else {
      ++counts.true_positives;
      counts.distance_sum += pair.distance;
    }
  }
  for (std::size_t f = 0; f < found.size(); ++f)
    if (!found_used[f]) {
      // Near a weak spot that another detection already took: still not held against the finder.
      bool near_weak = false;
      for (std::size_t t = 0; t < truth.size() && !near_weak; ++t) {
        if (truth[t].panel != found[f].panel || truth[t].snr >= min_truth_snr) continue;
        const double dx = found[f].x - truth[t].x, dy = found[f].y - truth[t].y;
        near_weak = dx * dx + dy * dy <= r2;
      }
      if (near_weak)
        ++counts.ignored;
      else
        ++counts.false_positives;
    }
  for (std::size_t t = 0; t < truth.size(); ++t)
    if (!truth_used[t] && truth[t].snr >= min_truth_snr) ++counts.false_negatives;
  return counts;
}

}  // namespace mixprec::stream
