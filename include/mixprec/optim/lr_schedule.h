#pragma once
// The learning-rate schedule the training commands use: linear warm-up over `warmup` steps to
// `peak`, then a cosine decay to `floor` x peak at `total` steps (held there after).
#include <cstdint>

namespace mixprec::optim {

double warmup_cosine_lr(double peak, int64_t step, int64_t warmup, int64_t total,
                        double floor = 0.1);

}  // namespace mixprec::optim
