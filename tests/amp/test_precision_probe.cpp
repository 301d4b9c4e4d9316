#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/dispatch.h"

namespace mixprec::amp {
namespace {

DTypeMeasurement timed(DType dtype, double ms, bool passed = true) {
  DTypeMeasurement m;
  m.dtype = dtype;
  m.gemm_ms = ms * 0.75;
  m.conv_ms = ms * 0.25;
  m.peak_bytes = 1 << 20;
  m.tolerance = precision_tolerance(dtype);
  m.error = passed ? m.tolerance / 4 : m.tolerance * 3;
  m.passed = passed;
  return m;
}

DType chosen(const std::vector<DTypeMeasurement>& m) { return choose_precision(m).dtype; }

bool mentions(const std::vector<std::string>& reasons, const std::string& what) {
  for (const std::string& r : reasons)
    if (r.find(what) != std::string::npos) return true;
  return false;
}

TEST(PrecisionChoice, TheFastestThatPassedWins) {
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 5), timed(DType::F16, 7)}),
            DType::BF16);
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 9), timed(DType::F16, 7)}),
            DType::F16);
  EXPECT_EQ(chosen({timed(DType::F32, 4), timed(DType::BF16, 9), timed(DType::F16, 7)}),
            DType::F32);  // the AVX2 case the issue names: 16-bit storage slower than f32
  const PrecisionDecision d =
      choose_precision(std::vector{timed(DType::F32, 10), timed(DType::BF16, 5)});
  EXPECT_TRUE(mentions(d.reasons, "bf16 chosen: the fastest that passed, 2.00x f32's speed"));
  EXPECT_TRUE(mentions(d.reasons, "f32: 10.000 ms (GEMM 7.500 + conv 2.500), peak 1024 KiB"));
}

TEST(PrecisionChoice, AFailedCheckIsNoCandidateHoweverFast) {
  const std::vector m = {timed(DType::F32, 10), timed(DType::BF16, 2, false), timed(DType::F16, 6)};
  const PrecisionDecision d = choose_precision(m);
  EXPECT_EQ(d.dtype, DType::F16);
  EXPECT_TRUE(mentions(d.reasons, "bf16: 2.000 ms"));
  EXPECT_TRUE(mentions(d.reasons, "FAILED the check"));
  EXPECT_EQ(
      chosen({timed(DType::F32, 10), timed(DType::BF16, 2, false), timed(DType::F16, 6, false)}),
      DType::F32);
}

TEST(PrecisionChoice, NothingPassedKeepsF32) {
  const PrecisionDecision d =
      choose_precision(std::vector{timed(DType::F32, 10, false), timed(DType::BF16, 5, false)});
  EXPECT_EQ(d.dtype, DType::F32);
  EXPECT_TRUE(mentions(d.reasons, "no dtype passed its check"));
  EXPECT_EQ(chosen({}), DType::F32);
}

TEST(PrecisionChoice, TiesGoToTheMorePrecise) {
  // Exact ties: f32, then bf16 (f32's range, no loss scaling), then f16.
  EXPECT_EQ(chosen({timed(DType::F16, 10), timed(DType::BF16, 10), timed(DType::F32, 10)}),
            DType::F32);
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::F16, 5), timed(DType::BF16, 5)}),
            DType::BF16);
  // Within the margin (10%) counts as a tie, beyond it does not.
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 9.2)}), DType::F32);
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 8.9)}), DType::BF16);
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 5), timed(DType::F16, 4.6)}),
            DType::BF16);
  EXPECT_EQ(chosen({timed(DType::F32, 10), timed(DType::BF16, 5), timed(DType::F16, 4.4)}),
            DType::F16);
  // A tie with a dtype that failed is no tie.
  EXPECT_EQ(chosen({timed(DType::F32, 10, false), timed(DType::BF16, 10)}), DType::BF16);
  const PrecisionDecision d =
      choose_precision(std::vector{timed(DType::F32, 10), timed(DType::BF16, 9.5)});
  EXPECT_TRUE(mentions(d.reasons, "f32 chosen: within 10% of the fastest (bf16)"));
}

// A fresh directory per test, removed after it.
class PrecisionProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mixprec_probe_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const std::string& p, const std::string& text) {
    std::ofstream(p, std::ios::trunc) << text;
  }

 private:
  std::filesystem::path dir_;
};

TEST_F(PrecisionProbe, MeasuresAtTheForcedLevelAndSaysSo) {
  std::vector<IsaLevel> levels = {IsaLevel::Scalar};
  if (isa_supported(IsaLevel::Avx2)) levels.push_back(IsaLevel::Avx2);
  for (IsaLevel level : levels) {
    ScopedIsa scope(level);
    const AutoPrecision a = auto_precision(path("cache.json"), /*remeasure=*/true);
    EXPECT_EQ(a.level, level);
    EXPECT_EQ(a.source, "measured");
    ASSERT_FALSE(a.reasons.empty());
    EXPECT_EQ(a.reasons.front(), "measured now at kernel level " + std::string(isa_name(level)));
    ASSERT_EQ(a.measurements.size(), 3u);
    for (const DTypeMeasurement& m : a.measurements) {
      EXPECT_TRUE(m.passed) << dtype_name(m.dtype) << " error " << m.error;
      EXPECT_GT(m.total_ms(), 0);
      EXPECT_GT(m.peak_bytes, 0u);
    }
    // The f32 operands take twice the bytes of the 16-bit ones, and the peak shows it.
    EXPECT_GT(a.measurements[0].peak_bytes, a.measurements[1].peak_bytes);
    EXPECT_EQ(a.dtype, choose_precision(a.measurements).dtype);
  }
  // Both levels are in the cache, each under its own key.
  const std::string text = read(path("cache.json"));
  EXPECT_NE(text.find("\"kernel_level\": \"scalar\""), std::string::npos) << text;
  if (levels.size() == 2) {
    EXPECT_NE(text.find("\"kernel_level\": \"avx2\""), std::string::npos) << text;
  }
}

TEST_F(PrecisionProbe, TheCacheRoundTrips) {
  ScopedIsa scope(IsaLevel::Scalar);
  const AutoPrecision first = auto_precision(path("sub/dir/cache.json"));  // dirs are created
  EXPECT_EQ(first.source, "measured");
  const AutoPrecision second = auto_precision(path("sub/dir/cache.json"));
  EXPECT_EQ(second.source, "cache");
  EXPECT_EQ(second.dtype, first.dtype);
  EXPECT_EQ(second.level, IsaLevel::Scalar);
  ASSERT_EQ(second.measurements.size(), first.measurements.size());
  for (std::size_t i = 0; i < first.measurements.size(); ++i) {
    EXPECT_EQ(second.measurements[i].dtype, first.measurements[i].dtype);
    EXPECT_EQ(second.measurements[i].gemm_ms, first.measurements[i].gemm_ms);
    EXPECT_EQ(second.measurements[i].conv_ms, first.measurements[i].conv_ms);
    EXPECT_EQ(second.measurements[i].peak_bytes, first.measurements[i].peak_bytes);
    EXPECT_EQ(second.measurements[i].error, first.measurements[i].error);
    EXPECT_EQ(second.measurements[i].passed, first.measurements[i].passed);
  }
  EXPECT_TRUE(mentions(second.reasons, "read from " + path("sub/dir/cache.json")));
  // remeasure ignores the cache.
  EXPECT_EQ(auto_precision(path("sub/dir/cache.json"), true).source, "measured");
}

TEST_F(PrecisionProbe, ACorruptCacheIsMeasuredAgainAndRepaired) {
  ScopedIsa scope(IsaLevel::Scalar);
  const std::string cache = path("cache.json");
  auto stored = [&] {
    auto_precision(cache);
    return read(cache);
  };
  const std::string good = stored();
  const std::string damaged[] = {
      "{not json", "", "{\"entries\": [{\"cpu_model\": 3}]}", "[1, 2]",
      good.substr(0, good.size() / 2),
      // Edited: the entry's decision (its first "dtype") no longer follows from its measurements.
      [&] {
        const std::size_t at = good.find("\"dtype\": \"") + 10;
        const std::size_t end = good.find('"', at);
        return good.substr(0, at) + (good.substr(at, end - at) == "f32" ? "f16" : "f32") +
               good.substr(end);
      }()};
  for (const std::string& text : damaged) {
    write(cache, text);
    const AutoPrecision a = auto_precision(cache);
    EXPECT_EQ(a.source, "measured") << text;
    EXPECT_TRUE(mentions(a.reasons, "unreadable")) << text;
    EXPECT_EQ(auto_precision(cache).source, "cache") << "not repaired after: " << text;
  }
}

TEST_F(PrecisionProbe, AnUnwritableCacheStillDecides) {
  ScopedIsa scope(IsaLevel::Scalar);
  write(path("file"), "a file, not a directory");
  const AutoPrecision a = auto_precision(path("file/cache.json"));
  EXPECT_EQ(a.source, "measured");
  EXPECT_EQ(a.dtype, choose_precision(a.measurements).dtype);
  EXPECT_TRUE(mentions(a.reasons, "not cached")) << a.reasons.back();
  // No cache at all (no HOME, no XDG_CACHE_HOME) is fine too.
  EXPECT_EQ(auto_precision("").source, "measured");
}

TEST(PrecisionTolerance, FollowsEachDtypesRoundoff) {
  EXPECT_LT(precision_tolerance(DType::F32), 1e-5);
  EXPECT_NEAR(precision_tolerance(DType::F16), 4 * 0x1p-11, 1e-5);
  EXPECT_NEAR(precision_tolerance(DType::BF16), 4 * 0x1p-8, 1e-5);
}

}  // namespace
}  // namespace mixprec::amp
