#include <gtest/gtest.h>

#include "mixprec/optim/lr_schedule.h"

namespace mixprec::optim {
namespace {

TEST(WarmupCosineLr, WarmsUpLinearlyThenDecaysToTheFloor) {
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(1.0, 0, 10, 110), 0.1);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(1.0, 9, 10, 110), 1.0);
  EXPECT_DOUBLE_EQ(warmup_cosine_lr(1.0, 10, 10, 110), 1.0);
  EXPECT_NEAR(warmup_cosine_lr(1.0, 60, 10, 110), 0.55, 1e-12);  // half way: mid of [0.1, 1]
  EXPECT_NEAR(warmup_cosine_lr(1.0, 110, 10, 110), 0.1, 1e-12);
  EXPECT_NEAR(warmup_cosine_lr(1.0, 500, 10, 110), 0.1, 1e-12);  // held after the end
  EXPECT_NEAR(warmup_cosine_lr(2.0, 110, 10, 110, 0.0), 0.0, 1e-12);
}

}  // namespace
}  // namespace mixprec::optim
