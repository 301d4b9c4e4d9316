// The CXI peak list, read back field by field with libhdf5's C API.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <vector>

#include "hdf5_test_util.h"
#include "mixprec/stream/cxi_writer.h"
#include "support/error_of.h"

namespace mixprec::stream {
namespace {

using test::read_raw;

Peak peak(int32_t panel, float x, float y, float intensity, int32_t pixels = 3) {
  Peak p;
  p.panel = panel, p.x = x, p.y = y, p.total_intensity = intensity, p.n_pixels = pixels;
  p.max_value = intensity / 2, p.snr = intensity / 10;
  return p;
}

TEST(CxiWriter, EveryFieldAsCrystFELReadsIt) {
  test::TempDir dir("cxi_fields");
  const std::string path = dir.file("peaks.cxi");
  const CxiLayout layout{4, 352, 384};
  std::vector<std::vector<Peak>> frames = {
      {peak(0, 10.25f, 20.5f, 1000), peak(2, 383.0f, 0.0f, 50, 7)},
      {},
      {peak(1, 1, 2, 30), peak(1, 3, 4, 300), peak(3, 5, 6, 20), peak(3, 7, 8, 400), peak(0, 9, 9, 200)},
  };
  {
    CxiWriter writer(path, layout, {.max_peaks = 4, .chunk_frames = 2});
    for (const auto& f : frames) writer.append(f);
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before close()";
    writer.close();
    EXPECT_EQ(writer.frames(), 3);
    EXPECT_EQ(writer.peaks_written(), 6);
    EXPECT_EQ(writer.truncated_frames(), 1);
  }
  EXPECT_EQ(dir.entries(), 1u) << "a temporary file was left behind";

  const test::RawDataset n = read_raw(path, "/entry_1/result_1/nPeaks");
  EXPECT_EQ(n.type_class, H5T_INTEGER);
  EXPECT_EQ(n.type_size, 4u);
  EXPECT_TRUE(n.is_signed);
  ASSERT_EQ(n.dims, (std::vector<hsize_t>{3}));
  EXPECT_EQ(n.values, (std::vector<double>{2, 0, 4}));

  // Frame 2 has five peaks for four slots (intensities 30, 300, 20, 400, 200): the weakest (20)
  // goes, the others keep their found order.
  const std::vector<std::vector<double>> expected = {
      // X, Y (panel * 352 + row), intensity, pixels, maximum, SNR for each kept peak
      {10.25, 20.5, 1000, 3, 500, 100}, {383, 2 * 352 + 0, 50, 7, 25, 5},
      {1, 352 + 2, 30, 3, 15, 3}, {3, 352 + 4, 300, 3, 150, 30}, {7, 3 * 352 + 8, 400, 3, 200, 40},
      {9, 9, 200, 3, 100, 20}};
  const char* names[] = {"peakXPosRaw", "peakYPosRaw", "peakTotalIntensity", "peakNPixels",
                         "peakMaximumValue", "peakSNR"};
  const std::vector<std::pair<int, int>> slots = {{0, 0}, {0, 1}, {2, 0}, {2, 1}, {2, 2}, {2, 3}};
  for (int c = 0; c < 6; ++c) {
    const test::RawDataset d = read_raw(path, std::string("/entry_1/result_1/") + names[c]);
    EXPECT_EQ(d.type_class, H5T_FLOAT) << names[c];
    EXPECT_EQ(d.type_size, 4u) << names[c];
    ASSERT_EQ(d.dims, (std::vector<hsize_t>{3, 4})) << names[c];
    std::vector<double> want(12, 0.0);
    for (std::size_t k = 0; k < slots.size(); ++k)
      want[static_cast<std::size_t>(slots[k].first * 4 + slots[k].second)] = expected[k][static_cast<std::size_t>(c)];
    EXPECT_EQ(d.values, want) << names[c];
  }
}

TEST(CxiWriter, DefaultWidthIs2048AndLongRunsGrowInChunks) {
  test::TempDir dir("cxi_width");
  const std::string path = dir.file("long.cxi");
  CxiWriter writer(path, {1, 352, 384});
  for (int i = 0; i < 130; ++i) writer.append(std::vector<Peak>(static_cast<std::size_t>(i % 3), peak(0, 1, 1, 5)));
  writer.close();
  const test::RawDataset x = read_raw(path, "/entry_1/result_1/peakXPosRaw");
  EXPECT_EQ(x.dims, (std::vector<hsize_t>{130, 2048}));
  const test::RawDataset n = read_raw(path, "/entry_1/result_1/nPeaks");
  ASSERT_EQ(n.values.size(), 130u);
  for (int i = 0; i < 130; ++i) EXPECT_EQ(n.values[static_cast<std::size_t>(i)], i % 3);
}

TEST(CxiWriter, EachRowNamesItsInputFrame) {
  test::TempDir dir("cxi_index");
  const std::string path = dir.file("dropped.cxi");
  CxiWriter writer(path, {1, 10, 10}, {.chunk_frames = 2});
  writer.append(std::vector<Peak>{}, 0);
  writer.append(std::vector<Peak>{}, 3);  // frames 1 and 2 were dropped
  writer.append(std::vector<Peak>{}, 7);
  writer.close();
  const test::RawDataset index = read_raw(path, "/entry_1/result_1/frameIndex");
  EXPECT_EQ(index.type_class, H5T_INTEGER);
  EXPECT_EQ(index.type_size, 8u);
  EXPECT_EQ(index.values, (std::vector<double>{0, 3, 7}));
  // Without an index a row is its own frame (the file read in order, nothing dropped).
  const std::string plain = dir.file("plain.cxi");
  CxiWriter in_order(plain, {1, 10, 10});
  for (int i = 0; i < 3; ++i) in_order.append(std::vector<Peak>{});
  in_order.close();
  EXPECT_EQ(read_raw(plain, "/entry_1/result_1/frameIndex").values, (std::vector<double>{0, 1, 2}));
}

TEST(CxiWriter, NothingAppearsWithoutClose) {
  test::TempDir dir("cxi_abandon");
  const std::string path = dir.file("abandoned.cxi");
  {
    CxiWriter writer(path, {1, 10, 10});
    writer.append(std::vector<Peak>{peak(0, 1, 1, 5)});
  }
  EXPECT_EQ(dir.entries(), 0u);
}

TEST(CxiWriter, UnwritablePathIsAClearError) {
  test::TempDir dir("cxi_unwritable");
  const std::string message =
      test_support::error_of([&] { CxiWriter(dir.file("no/such/dir/peaks.cxi"), {1, 10, 10}); });
  EXPECT_NE(message.find("[cxi]"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot create a temporary file"), std::string::npos) << message;
  const std::string on_dir = test_support::error_of([&] { CxiWriter(dir.path.string(), {1, 10, 10}); });
  EXPECT_NE(on_dir.find("is a directory"), std::string::npos) << on_dir;
  const std::string bad_panel = test_support::error_of([&] {
    CxiWriter w(dir.file("p.cxi"), {2, 10, 10});
    w.append(std::vector<Peak>{peak(2, 1, 1, 1)});
  });
  EXPECT_NE(bad_panel.find("peak on panel 2 of a 2-panel layout"), std::string::npos) << bad_panel;
  EXPECT_EQ(dir.entries(), 0u);
}

}  // namespace
}  // namespace mixprec::stream
