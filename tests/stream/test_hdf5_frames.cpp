// HDF5 frames: the synthetic writer read back, files of every supported element type made with
// the plain C API, the one conversion into f32/f16/bf16, and every kind of bad file.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "hdf5_test_util.h"
#include "mixprec/core/float16.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/stream/hdf5_frames.h"
#include "support/error_of.h"

namespace mixprec::stream {
namespace {

using test_support::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A frame file of `frames` synthetic frames of `detector` (seed `seed`) with its mask, geometry
// and ground truth, as `stream produce --synthetic` writes it.
void write_synthetic(const std::string& path, const std::string& detector, uint64_t seed, int64_t frames) {
  const SyntheticDetector det(detector_geometry(detector), {}, seed);
  Hdf5FrameWriter writer(path, det.geometry(), det.bad_pixel_mask());
  SyntheticFrame f;
  for (int64_t i = 0; i < frames; ++i) {
    det.generate(i, f);
    writer.append(f.adu, f.peaks);
  }
  writer.close();
}

TEST(Hdf5Frames, SplitsTheDatasetFromTheFileName) {
  EXPECT_EQ(split_frame_source("run.h5"), std::make_pair(std::string("run.h5"), std::string("/entry_1/data_1/data")));
  EXPECT_EQ(split_frame_source("run.h5:/data/frames"), std::make_pair(std::string("run.h5"), std::string("/data/frames")));
  EXPECT_EQ(split_frame_source("a:b.h5:/x"), std::make_pair(std::string("a:b.h5"), std::string("/x")));
}

TEST(Hdf5Frames, SyntheticFramesRoundTripWithTruthMaskAndGeometry) {
  test::TempDir dir("frames_roundtrip");
  const std::string path = dir.file("quad.h5");
  const SyntheticDetector det(detector_geometry("quad"), {}, 17);
  std::vector<SyntheticFrame> made(3);
  {
    Hdf5FrameWriter writer(path, det.geometry(), det.bad_pixel_mask());
    for (int64_t i = 0; i < 3; ++i) {
      det.generate(i, made[static_cast<std::size_t>(i)]);
      writer.append(made[static_cast<std::size_t>(i)].adu, made[static_cast<std::size_t>(i)].peaks);
    }
    writer.set_attribute("generator", "test");
    EXPECT_FALSE(std::filesystem::exists(path));
    writer.close();
  }
  EXPECT_EQ(dir.entries(), 1u);
  Hdf5FrameReader reader(path);
  EXPECT_EQ(reader.dataset_path(), "/entry_1/data_1/data");
  EXPECT_EQ(reader.frames(), 3);
  EXPECT_EQ(reader.panels(), 4);
  EXPECT_EQ(reader.rows(), 352);
  EXPECT_EQ(reader.cols(), 384);
  EXPECT_EQ(reader.sample_type(), SampleType::U16);
  const std::size_t n = static_cast<std::size_t>(reader.frame_elements());
  std::vector<float> f32(n);
  std::vector<uint16_t> half(n), reference(n);
  for (int64_t i = 0; i < 3; ++i) {
    const SyntheticFrame& f = made[static_cast<std::size_t>(i)];
    reader.read(i, f32.data(), DType::F32);
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(f32[k], static_cast<float>(f.adu[k])) << k;
    // bf16 and f16 straight from u16: the same bits as rounding the exact f32 value once.
    for (DType t : {DType::BF16, DType::F16}) {
      reader.read(i, half.data(), t);
      kernels::convert(f32.data(), DType::F32, reference.data(), t, n);
      ASSERT_EQ(half, reference) << dtype_name(t);
    }
  }
  EXPECT_EQ(reader.bad_pixel_mask(), det.bad_pixel_mask());
  const std::optional<DetectorGeometry> g = reader.geometry();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->name, "quad");
  for (int64_t p = 0; p < 4; ++p) {
    EXPECT_EQ(g->placement[static_cast<std::size_t>(p)].origin_x, det.geometry().placement[static_cast<std::size_t>(p)].origin_x);
    EXPECT_EQ(g->placement[static_cast<std::size_t>(p)].origin_y, det.geometry().placement[static_cast<std::size_t>(p)].origin_y);
  }
  const auto truth = reader.ground_truth();
  ASSERT_TRUE(truth.has_value());
  ASSERT_EQ(truth->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ((*truth)[i].size(), made[i].peaks.size());
    for (std::size_t k = 0; k < made[i].peaks.size(); ++k) {
      EXPECT_EQ((*truth)[i][k].panel, made[i].peaks[k].panel);
      EXPECT_EQ((*truth)[i][k].x, made[i].peaks[k].x);
      EXPECT_EQ((*truth)[i][k].y, made[i].peaks[k].y);
      EXPECT_EQ((*truth)[i][k].intensity_adu, made[i].peaks[k].intensity_adu);
      EXPECT_EQ((*truth)[i][k].snr, made[i].peaks[k].snr);
    }
  }
  EXPECT_NE(error_of([&] { reader.read(3, f32.data(), DType::F32); }).find("frame 3 out of range"), std::string::npos);
}

TEST(Hdf5Frames, OnePanelIsThreeDimensional) {
  test::TempDir dir("frames_single");
  const std::string path = dir.file("single.h5");
  const SyntheticDetector det(detector_geometry("single"), {}, 1);
  SyntheticFrame f;
  det.generate(0, f);
  Hdf5FrameWriter writer(path, det.geometry(), {});
  writer.append(f.adu, {});
  writer.close();
  EXPECT_EQ(test::read_raw(path, "/entry_1/data_1/data").dims, (std::vector<hsize_t>{1, 352, 384}));
  Hdf5FrameReader reader(path);
  EXPECT_EQ(reader.panels(), 1);
  EXPECT_TRUE(reader.bad_pixel_mask().empty());
  const auto truth = reader.ground_truth();
  ASSERT_TRUE(truth.has_value());  // the table exists, with no rows
  EXPECT_TRUE((*truth)[0].empty());
}

TEST(Hdf5Frames, EverySupportedElementTypeAtANamedDataset) {
  test::TempDir dir("frames_types");
  struct Case {
    hid_t file_type;
    SampleType expected;
    std::vector<double> values;
  };
  const std::vector<Case> cases = {
      {H5T_STD_U8LE, SampleType::U8, {0, 1, 255, 7, 8, 9}},
      {H5T_STD_I8LE, SampleType::I8, {-128, -1, 127, 0, 5, 6}},
      {H5T_STD_U16BE, SampleType::U16, {0, 65535, 257, 1, 2, 3}},  // big-endian on disk
      {H5T_STD_I16LE, SampleType::I16, {-32768, 32767, -5, 0, 1, 2}},
      {H5T_STD_U32LE, SampleType::U32, {4294967295.0, 16777217, 3, 0, 1, 2}},
      {H5T_STD_I32LE, SampleType::I32, {-2147483648.0, 2147483647.0, 16777217, 0, 1, 2}},
      {H5T_STD_I64LE, SampleType::I64, {-9e15, 9e15, 3, 0, 1, 2}},
      {H5T_IEEE_F32LE, SampleType::F32, {-1.5, 3.25, 1e30, 0, 1, 2}},
      {H5T_IEEE_F64BE, SampleType::F64, {-1.5, 3.25, 1e300, 0, 1, 2}},
  };
  for (const Case& c : cases) {
    const std::string file = dir.file("typed.h5");
    test::write_raw(file, "/data/frames", c.file_type, {2, 1, 3}, c.values);  // [N=2, H=1, W=3]
    Hdf5FrameReader reader(file + ":/data/frames");
    EXPECT_EQ(reader.sample_type(), c.expected) << sample_type_name(c.expected);
    ASSERT_EQ(reader.frames(), 2);
    for (int64_t i = 0; i < 2; ++i) {
      std::vector<double> f64(3);
      reader.read(i, f64.data(), DType::F64);
      std::vector<uint16_t> bf16(3), want(3);
      reader.read(i, bf16.data(), DType::BF16);
      for (int k = 0; k < 3; ++k) {
        const double v = c.values[static_cast<std::size_t>(i * 3 + k)];
        EXPECT_EQ(f64[static_cast<std::size_t>(k)], c.expected == SampleType::F32 ? static_cast<double>(static_cast<float>(v)) : v)
            << sample_type_name(c.expected);
      }
      // One rounding from the exact value: what converting the f64 values gives.
      kernels::convert(f64.data(), DType::F64, want.data(), DType::BF16, 3);
      EXPECT_EQ(bf16, want) << sample_type_name(c.expected);
    }
  }
}

TEST(Hdf5Frames, BadFilesAreClearErrors) {
  test::TempDir dir("frames_bad");
  std::vector<float> buffer(64);
  // Missing file, a directory, a file that is not HDF5.
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(dir.file("none.h5")); }), "none.h5: cannot read the file: No such file"));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(dir.path.string()); }), "is a directory"));
  std::ofstream(dir.file("text.h5")) << "not an HDF5 file at all\n";
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(dir.file("text.h5")); }), "not a readable HDF5 file"));
  // Missing dataset, missing parent group, a group named as the dataset.
  const std::string other = dir.file("other.h5");
  test::write_raw(other, "/entry_1/other", H5T_STD_U16LE, {1, 2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{other}; }), "no dataset '/entry_1/data_1/data'"));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(other + ":/nothing/here"); }), "no dataset '/nothing/here'"));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(other + ":/entry_1"); }), "is not a readable dataset"));
  // Wrong rank, unsupported element types.
  const std::string flat = dir.file("flat.h5");
  test::write_raw(flat, "/entry_1/data_1/data", H5T_STD_U16LE, {4, 4}, std::vector<double>(16, 1));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{flat}; }), "has shape [4, 4], expected [frames, rows, cols]"));
  const std::string five = dir.file("five.h5");
  test::write_raw(five, "/entry_1/data_1/data", H5T_STD_U16LE, {1, 1, 1, 2, 2}, std::vector<double>(4, 1));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{five}; }), "has shape [1, 1, 1, 2, 2]"));
  const std::string u64 = dir.file("u64.h5");
  test::write_raw(u64, "/entry_1/data_1/data", H5T_STD_U64LE, {1, 2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{u64}; }), "unsupported element type"));
  {
    const std::string strings = dir.file("strings.h5");
    const hid_t f = H5Fcreate(strings.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 4);
    const hsize_t dims[3] = {1, 1, 1};
    const hid_t space = H5Screate_simple(3, dims, nullptr);
    const hid_t links = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(links, 1);
    H5Dclose(H5Dcreate2(f, "/entry_1/data_1/data", type, space, links, H5P_DEFAULT, H5P_DEFAULT));
    H5Pclose(links), H5Sclose(space), H5Tclose(type), H5Fclose(f);
    EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{strings}; }), "unsupported element type"));
  }
  // An empty frame shape.
  const std::string empty = dir.file("empty.h5");
  test::write_raw(empty, "/entry_1/data_1/data", H5T_STD_U16LE, {3, 0, 5}, {});
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{empty}; }), "a frame must be non-empty"));
}

TEST(Hdf5Frames, TruncatedAndCorruptFilesAreErrorsNotCrashes) {
  test::TempDir dir("frames_truncated");
  const std::string good = dir.file("good.h5");
  write_synthetic(good, "single", 3, 4);
  const auto size = std::filesystem::file_size(good);
  std::vector<float> frame(352 * 384);
  for (double keep : {0.9, 0.5, 0.1, 0.001}) {
    const std::string cut = dir.file("cut.h5");
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, static_cast<std::uintmax_t>(static_cast<double>(size) * keep));
    const std::string message = error_of([&] {
      Hdf5FrameReader reader(cut);
      for (int64_t i = 0; i < reader.frames(); ++i) reader.read(i, frame.data(), DType::F32);
      (void)reader.ground_truth();
    });
    EXPECT_TRUE(contains(message, "cut.h5")) << message;
    EXPECT_TRUE(contains(message, "truncated")) << "kept " << keep << ": " << message;
  }
  // The signature overwritten: no longer an HDF5 file.
  const std::string corrupt = dir.file("corrupt.h5");
  std::filesystem::copy_file(good, corrupt);
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("garbage!", 8);
  }
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{corrupt}; }), "not a readable HDF5 file"));
}

TEST(Hdf5Frames, CorruptedMetadataIsAnErrorOrAGoodReadNeverACrash) {
  // A poor man's fuzz (a libFuzzer target is still to come): copies of a small frame file with a
  // few bytes changed where HDF5 keeps its metadata (the first and last 64 KiB), each read in
  // full. Every outcome must be a mixprec::Error or a complete read.
  test::TempDir dir("frames_corrupt");
  const std::string good = dir.file("good.h5");
  write_synthetic(good, "single", 8, 2);
  std::ifstream in(good, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t window = std::min<std::size_t>(bytes.size(), 65536);
  std::mt19937 rng(2026);
  std::vector<float> frame(352 * 384);
  int errors = 0, reads = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<char> copy = bytes;
    for (unsigned k = 0, n = 1 + rng() % 8; k < n; ++k) {
      const std::size_t at = rng() % window;
      copy[(rng() % 2) ? at : copy.size() - 1 - at] = static_cast<char>(rng());
    }
    const std::string path = dir.file("corrupt.h5");
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(copy.data(), static_cast<std::streamsize>(copy.size()));
    try {
      Hdf5FrameReader reader(path);
      for (int64_t i = 0; i < reader.frames(); ++i) reader.read(i, frame.data(), DType::F32);
      (void)reader.bad_pixel_mask();
      (void)reader.geometry();
      (void)reader.ground_truth();
      ++reads;
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "corrupt.h5")) << e.what();
      ++errors;
    }
  }
  EXPECT_EQ(errors + reads, 60);
}

// Everything a reader gives, frames in the file's own type, for comparing two readers.
struct ReadBack {
  std::vector<std::vector<std::byte>> frames;
  std::vector<uint8_t> mask;
  std::vector<std::pair<double, double>> placement;
  std::vector<std::vector<TruePeak>> truth;
};

ReadBack read_back(Hdf5FrameReader& reader) {
  ReadBack r;
  for (int64_t i = 0; i < reader.frames(); ++i) {
    const auto raw = reader.read_raw(i);
    r.frames.emplace_back(raw.begin(), raw.end());
  }
  r.mask = reader.bad_pixel_mask();
  const DetectorGeometry geometry = reader.geometry().value();
  for (const PanelPlacement& p : geometry.placement) r.placement.push_back({p.origin_x, p.origin_y});
  r.truth = reader.ground_truth().value();
  return r;
}

const std::string kLibhdf5Crash = MIXPREC_SOURCE_DIR "/tests/fuzz/hdf5_libhdf5_crashes/h5lexists_segv.h5";

TEST(Hdf5FramesProbe, AFileThatCrashesLibhdf5IsAClearErrorAndThisProcessLivesOn) {
  // Debian's libhdf5 1.10.8 segfaults in H5Lexists on this file (a corrupt local heap); the
  // probe child dies of it instead of this process.
  ASSERT_TRUE(std::filesystem::exists(kLibhdf5Crash));
  for (int twice = 0; twice < 2; ++twice) {
    const std::string message = error_of([] { Hdf5FrameReader reader(kLibhdf5Crash); });
    EXPECT_TRUE(contains(message, "h5lexists_segv.h5: corrupt HDF5 file: libhdf5 crashed reading it")) << message;
    EXPECT_TRUE(contains(message, "killed by signal")) << message;
    EXPECT_TRUE(contains(message, "not opened in this process")) << message;
  }
  const std::string probed = error_of([] { probe_hdf5_frames(kLibhdf5Crash, {.probe = Hdf5Probe::AllFrames}); });
  EXPECT_TRUE(contains(probed, "libhdf5 crashed")) << probed;
  // Still alive, and libhdf5 here untouched by the file: a sound file reads.
  test::TempDir dir("frames_probe_crash");
  const std::string good = dir.file("good.h5");
  write_synthetic(good, "single", 5, 1);
  EXPECT_EQ(Hdf5FrameReader(good).frames(), 1);
}

TEST(Hdf5FramesProbe, ASoundFileReadsTheSameWithEveryProbe) {
  test::TempDir dir("frames_probe_same");
  const std::string path = dir.file("quad.h5");
  write_synthetic(path, "quad", 23, 4);
  Hdf5FrameReader unprobed(path, {.probe = Hdf5Probe::Off});
  const ReadBack reference = read_back(unprobed);
  ASSERT_EQ(reference.frames.size(), 4u);
  for (const Hdf5Probe probe : {Hdf5Probe::Metadata, Hdf5Probe::AllFrames}) {
    Hdf5FrameReader reader(path, {.probe = probe});
    const ReadBack got = read_back(reader);
    EXPECT_EQ(got.frames, reference.frames);
    EXPECT_EQ(got.mask, reference.mask);
    EXPECT_EQ(got.placement, reference.placement);
    ASSERT_EQ(got.truth.size(), reference.truth.size());
    for (std::size_t i = 0; i < got.truth.size(); ++i) {
      ASSERT_EQ(got.truth[i].size(), reference.truth[i].size());
      for (std::size_t k = 0; k < got.truth[i].size(); ++k) {
        EXPECT_EQ(got.truth[i][k].x, reference.truth[i][k].x);
        EXPECT_EQ(got.truth[i][k].y, reference.truth[i][k].y);
        EXPECT_EQ(got.truth[i][k].panel, reference.truth[i][k].panel);
      }
    }
  }
}

TEST(Hdf5FramesProbe, AFileRefusedInTheProbeIsTheReadersOwnClearError) {
  // The child came through (with an Error): the reader reports the file's fault itself.
  test::TempDir dir("frames_probe_refused");
  const std::string text = dir.file("text.h5");
  std::ofstream(text) << "not hdf5";
  EXPECT_NO_THROW(probe_hdf5_frames(text));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{text}; }), "not a readable HDF5 file"));
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader(dir.file("none.h5")); }), "none.h5: cannot read the file"));
}

TEST(Hdf5FramesProbe, AFileThatChangesBetweenProbeAndOpenIsStillAClearError) {
  // The reader is probe_hdf5_frames then an unprobed open; here the file changes between the
  // two, each way it can: removed, made unreadable garbage, cut short, replaced by the crash.
  test::TempDir dir("frames_probe_changed");
  const std::string good = dir.file("good.h5");
  write_synthetic(good, "single", 9, 3);
  const std::string path = dir.file("changing.h5");
  const auto probed_copy = [&] {
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    probe_hdf5_frames(path);
  };
  const auto open_and_read = [&] {
    Hdf5FrameReader reader(path, {.probe = Hdf5Probe::Off});
    std::vector<float> frame(static_cast<std::size_t>(reader.frame_elements()));
    for (int64_t i = 0; i < reader.frames(); ++i) reader.read(i, frame.data(), DType::F32);
    (void)reader.ground_truth();
  };
  probed_copy();
  std::filesystem::remove(path);
  EXPECT_TRUE(contains(error_of(open_and_read), "changing.h5: cannot read the file")) << error_of(open_and_read);

  probed_copy();
  std::ofstream(path, std::ios::trunc) << "garbage now";
  EXPECT_TRUE(contains(error_of(open_and_read), "changing.h5: not a readable HDF5 file"));

  probed_copy();
  std::filesystem::resize_file(path, std::filesystem::file_size(good) / 2);
  const std::string cut = error_of(open_and_read);
  EXPECT_TRUE(contains(cut, "changing.h5") && contains(cut, "truncated")) << cut;

  // Replaced by a file libhdf5 crashes on: the unprobed open would crash, the probed one (the
  // reader's default) refuses it; the probe is per open, never cached by name.
  probed_copy();
  std::filesystem::copy_file(kLibhdf5Crash, path, std::filesystem::copy_options::overwrite_existing);
  EXPECT_TRUE(contains(error_of([&] { Hdf5FrameReader{path}; }), "libhdf5 crashed"));
}

TEST(Hdf5Frames, BadGroundTruthAndMaskAreErrors) {
  test::TempDir dir("frames_bad_truth");
  const std::string file = dir.file("t.h5");
  test::write_raw(file, "/entry_1/data_1/data", H5T_STD_U16LE, {2, 2, 2}, std::vector<double>(8, 1));
  test::write_raw(file, "/entry_1/data_1/mask", H5T_STD_U8LE, {3, 3}, std::vector<double>(9, 0), false);
  for (const char* name : {"frame", "panel", "x", "y", "intensity", "sigma", "snr"})
    test::write_raw(file, std::string("/entry_1/ground_truth/") + name, H5T_IEEE_F32LE, {1},
                    {std::string(name) == "frame" ? 5.0 : 0.0}, false);
  const Hdf5FrameReader reader(file);
  EXPECT_TRUE(contains(error_of([&] { (void)reader.ground_truth(); }), "ground-truth row 0 (frame 5, panel 0) is outside the 2 frames"));
  EXPECT_TRUE(contains(error_of([&] { (void)reader.bad_pixel_mask(); }), "has shape [3, 3], expected the frame's [2, 2]"));
}

}  // namespace
}  // namespace mixprec::stream
