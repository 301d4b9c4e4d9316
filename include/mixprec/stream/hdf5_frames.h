#pragma once
// Detector frames in HDF5 files: a reader for what beamlines write and a writer for the
// synthetic frames (with their ground truth, bad-pixel mask and geometry).
//
// The layout (CXI-like, what psocake and the LCLS/EuXFEL converters produce):
//   /entry_1/data_1/data   [N, H, W] or [N, P, H, W], integer (u8/i8/u16/i16/u32/i32/i64) or
//                          float (f32/f64); another dataset is named as "FILE.h5:/path";
//   /entry_1/data_1/mask   optional [H, W] or [P, H, W] integer, nonzero = bad pixel;
//   /entry_1/instrument_1/detector_1/{panel_origin_x, panel_origin_y}  optional f64 [P]:
//                          the lab position of each panel's pixel (0, 0) (detector.h), with a
//                          string attribute "name";
//   /entry_1/ground_truth/{frame i64, panel i32, x f32, y f32, intensity f32, sigma f32,
//                          snr f32}  optional [M]: one row per true peak (synthetic files).
// Files are untrusted: every shape, dtype and index is checked, HDF5 failures (a truncated or
// corrupt file) become mixprec::Error naming the file and HDF5's reason; nothing is read past
// a buffer. One reader or writer must not be used from two threads at once (libhdf5 itself is
// not thread-safe in Debian's serial build).
//
// Some corrupt files crash libhdf5 itself instead of making it return an error (Debian's 1.10.8
// segfaults in H5Lexists on a corrupt local heap: tests/fuzz/hdf5_libhdf5_crashes/). So before
// this process opens a file, a forked child process does the reader's work on it first
// (core/forked_child.h, Hdf5Probe below); when libhdf5 kills the child or hangs in it, the
// reader throws Error "corrupt HDF5 file ... libhdf5 crashed reading it" and this process never
// touches the file. docs/STREAM.md ("Corrupt HDF5 files that crash libhdf5") has what is
// probed, what it costs per file and what it leaves open.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/core/dtype.h"
#include "mixprec/stream/detector.h"
#include "mixprec/stream/sample_types.h"
#include "mixprec/stream/synthetic_frames.h"

namespace mixprec::stream {

inline constexpr std::string_view kDefaultFrameDataset = "/entry_1/data_1/data";
inline constexpr std::string_view kMaskDataset = "/entry_1/data_1/mask";

// "FILE.h5" -> {FILE.h5, /entry_1/data_1/data}; "FILE.h5:/path" -> {FILE.h5, /path}. Split at
// the last ":/" so file names with colons still work.
std::pair<std::string, std::string> split_frame_source(std::string_view spec);

// What the child process does with a file before this process opens it.
enum class Hdf5Probe {
  Off,       // nothing: for a file known to be sound (one this process just wrote)
  Metadata,  // what the reader does at open and setup: the file, the dataset, its shape and
             // type, the mask, the geometry, the ground truth; the first and the last frame
             // read; every chunk of the frame dataset looked up in its index (up to 2^20)
  AllFrames, // the same and every frame read once: the whole dataset is read twice
};

struct Hdf5ReadOptions {
  Hdf5Probe probe = Hdf5Probe::Metadata;
  std::chrono::milliseconds probe_timeout{60'000};  // then the child is killed: Error
};

// The probe on its own: returns when a forked child came through `options.probe` on the file
// (with or without an Error, which the reader then reports itself); Error naming the file when
// libhdf5 crashed in the child or did not finish within the timeout ("corrupt HDF5 file"), or
// the child was killed by another signal ("could not be checked"). Error when it cannot fork.
void probe_hdf5_frames(std::string_view spec, const Hdf5ReadOptions& options = {});

class Hdf5FrameReader {
 public:
  // Probes the file (options.probe, above), then opens and checks the dataset: Error for a
  // file libhdf5 crashes on, a missing or unreadable file, a missing dataset, rank other than
  // 3 or 4, an element type outside the list above, or an empty frame shape.
  explicit Hdf5FrameReader(std::string_view spec, const Hdf5ReadOptions& options = {});
  ~Hdf5FrameReader();
  Hdf5FrameReader(Hdf5FrameReader&&) noexcept;
  Hdf5FrameReader& operator=(Hdf5FrameReader&&) noexcept;

  const std::string& file_path() const;
  const std::string& dataset_path() const;
  int64_t frames() const;
  int64_t panels() const;  // 1 for a [N, H, W] dataset
  int64_t rows() const;
  int64_t cols() const;
  int64_t frame_elements() const { return panels() * rows() * cols(); }
  SampleType sample_type() const;

  // Frame `index` (0 <= index < frames()) into dst: frame_elements() elements of dst_type,
  // converted once from the file's type (sample_types.h).
  void read(int64_t index, void* dst, DType dst_type);
  // Frame `index` in the file's own type (frame_elements() samples of sample_type()), valid
  // until the next read: what a sender puts on the wire without converting it.
  std::span<const std::byte> read_raw(int64_t index);

  // The optional parts (empty / nullopt when the file has none; Error when present but wrong).
  std::vector<uint8_t> bad_pixel_mask() const;              // (P, H, W) 1 = bad
  std::optional<DetectorGeometry> geometry() const;
  std::optional<std::vector<std::vector<TruePeak>>> ground_truth() const;  // (N) lists

 private:
  friend void probe_hdf5_frames(std::string_view, const Hdf5ReadOptions&);
  // The probe child's work, on a reader it opened with Hdf5Probe::Off.
  void read_through(Hdf5Probe depth);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Hdf5FrameWriterOptions {
  int deflate = 0;  // gzip level for the frames (0: none, the fastest to write and read)
};

// Writes uint16 frames of a geometry (dataset [N, H, W] for one panel, [N, P, H, W] otherwise),
// one HDF5 chunk per frame, and their ground truth. Atomic like the CXI writer: the file
// appears at `path` complete, at close(), or not at all.
class Hdf5FrameWriter {
 public:
  Hdf5FrameWriter(std::string path, const DetectorGeometry& geometry,
                  const std::vector<uint8_t>& bad_pixel_mask, Hdf5FrameWriterOptions options = {});
  ~Hdf5FrameWriter();
  Hdf5FrameWriter(const Hdf5FrameWriter&) = delete;
  Hdf5FrameWriter& operator=(const Hdf5FrameWriter&) = delete;

  // One frame: geometry.pixels() values, and its true peaks (may be empty).
  void append(std::span<const uint16_t> frame, std::span<const TruePeak> truth);
  // A provenance note on /entry_1 (e.g. "generator", "seed").
  void set_attribute(const std::string& name, const std::string& value);
  void close();

  int64_t frames() const;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixprec::stream
