#include "mixprec/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mixprec::optim {

double warmup_cosine_lr(double peak, int64_t step, int64_t warmup, int64_t total, double floor) {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) /
                        static_cast<double>(std::max<int64_t>(1, total - warmup)));
  return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
}

}  // namespace mixprec::optim
