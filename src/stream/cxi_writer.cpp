#include "mixprec/stream/cxi_writer.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "hdf5_handle.h"
#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"

namespace mixprec::stream {
namespace {

constexpr const char* kOp = "cxi";
constexpr const char* kResult = "/entry_1/result_1";

// The per-peak rows, in file order.
enum Column { kX, kY, kIntensity, kPixels, kMaximum, kSnr, kColumns };
constexpr const char* kColumnNames[kColumns] = {"peakXPosRaw",      "peakYPosRaw", "peakTotalIntensity",
                                                "peakNPixels",      "peakMaximumValue", "peakSNR"};

}  // namespace

struct CxiWriter::Impl {
  std::string path;
  CxiLayout layout;
  CxiWriterOptions options;
  io::AtomicFile temp;
  hdf5::Handle file, counts, frame_indices;
  hdf5::Handle columns[kColumns];
  std::vector<int32_t> pending_counts;              // (buffered frames)
  std::vector<int64_t> pending_indices;             // (buffered frames)
  std::vector<float> pending[kColumns];             // (buffered frames, max_peaks)
  int64_t frames = 0, peaks = 0, truncated = 0;
  bool closed = false;

  Impl(std::string p, CxiLayout l, CxiWriterOptions o)
      : path(std::move(p)), layout(l), options(o), temp(path, kOp) {}

  void flush() {
    const auto rows = static_cast<hsize_t>(pending_counts.size());
    if (rows == 0) return;
    hdf5::append_rows(counts.get(), H5T_NATIVE_INT32, rows, pending_counts.data(), kOp, path);
    hdf5::append_rows(frame_indices.get(), H5T_NATIVE_INT64, rows, pending_indices.data(), kOp,
                      path);
    for (int c = 0; c < kColumns; ++c)
      hdf5::append_rows(columns[c].get(), H5T_NATIVE_FLOAT, rows, pending[c].data(), kOp, path);
    pending_counts.clear();
    pending_indices.clear();
    for (auto& column : pending) column.clear();
  }
};

CxiWriter::CxiWriter(std::string path, CxiLayout layout, CxiWriterOptions options) {
  MIXPREC_CHECK(layout.panels >= 1 && layout.rows >= 1 && layout.cols >= 1, "[cxi] ", path,
                ": bad frame layout ", layout.panels, " x ", layout.rows, " x ", layout.cols);
  MIXPREC_CHECK(options.max_peaks >= 1 && options.chunk_frames >= 1 && options.deflate >= 0 &&
                    options.deflate <= 9,
                "[cxi] ", path, ": expected max_peaks >= 1, chunk_frames >= 1, deflate in [0, 9]");
  hdf5::silence_errors();
  impl_ = std::make_unique<Impl>(std::move(path), layout, options);
  Impl& m = *impl_;
  m.file = hdf5::check_id(H5Fcreate(m.temp.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                          H5Fclose, kOp, m.path, "cannot create the HDF5 file");
  const auto chunk = static_cast<hsize_t>(options.chunk_frames);
  const auto width = static_cast<hsize_t>(options.max_peaks);
  const std::string result = kResult;
  m.counts = hdf5::create_extendible(m.file.get(), result + "/nPeaks", H5T_STD_I32LE, {0}, {chunk},
                                     options.deflate, kOp, m.path);
  m.frame_indices = hdf5::create_extendible(m.file.get(), result + "/frameIndex", H5T_STD_I64LE,
                                            {0}, {chunk}, options.deflate, kOp, m.path);
  for (int c = 0; c < kColumns; ++c)
    m.columns[c] = hdf5::create_extendible(m.file.get(), result + "/" + kColumnNames[c],
                                           H5T_IEEE_F32LE, {0, width}, {chunk, width},
                                           options.deflate, kOp, m.path);
}

CxiWriter::~CxiWriter() = default;  // Impl's members close the handles; AtomicFile discards

void CxiWriter::append(std::span<const Peak> peaks, int64_t frame_index) {
  Impl& m = *impl_;
  MIXPREC_CHECK(!m.closed, "[cxi] ", m.path, ": append after close");
  MIXPREC_CHECK(frame_index >= -1, "[cxi] ", m.path, ": negative frame index ", frame_index);
  const auto width = static_cast<std::size_t>(m.options.max_peaks);
  // Which peaks fit: all, or the strongest `width` in their found order.
  std::vector<std::size_t> keep(peaks.size());
  std::iota(keep.begin(), keep.end(), 0);
  if (peaks.size() > width) {
    std::stable_sort(keep.begin(), keep.end(), [&](std::size_t a, std::size_t b) {
      return peaks[a].total_intensity > peaks[b].total_intensity;
    });
    keep.resize(width);
    std::sort(keep.begin(), keep.end());
    ++m.truncated;
  }
  for (auto& column : m.pending) column.resize(column.size() + width, 0.0f);
  const std::size_t row = m.pending_counts.size() * width;
  for (std::size_t k = 0; k < keep.size(); ++k) {
    const Peak& p = peaks[keep[k]];
    MIXPREC_CHECK(p.panel >= 0 && p.panel < m.layout.panels, "[cxi] ", m.path, ": peak on panel ",
                  p.panel, " of a ", m.layout.panels, "-panel layout");
    m.pending[kX][row + k] = p.x;
    m.pending[kY][row + k] = static_cast<float>(static_cast<double>(p.panel) * static_cast<double>(m.layout.rows) + p.y);
    m.pending[kIntensity][row + k] = p.total_intensity;
    m.pending[kPixels][row + k] = static_cast<float>(p.n_pixels);
    m.pending[kMaximum][row + k] = p.max_value;
    m.pending[kSnr][row + k] = p.snr;
  }
  m.pending_counts.push_back(static_cast<int32_t>(keep.size()));
  m.pending_indices.push_back(frame_index >= 0 ? frame_index : m.frames);
  ++m.frames;
  m.peaks += static_cast<int64_t>(keep.size());
  if (static_cast<int64_t>(m.pending_counts.size()) >= m.options.chunk_frames) m.flush();
}

void CxiWriter::close() {
  Impl& m = *impl_;
  MIXPREC_CHECK(!m.closed, "[cxi] ", m.path, ": closed twice");
  m.flush();
  {
    hdf5::Handle group = hdf5::check_id(H5Gopen2(m.file.get(), kResult, H5P_DEFAULT), H5Gclose, kOp,
                                        m.path, "cannot open the result group");
    hdf5::write_string_attribute(
        group.get(), "peak_coordinates",
        "slab: X = fast-scan column, Y = panel * rows + slow-scan row; pixel centres at integers "
        "(CrystFEL adds 0.5)",
        kOp, m.path);
    hdf5::write_int_attribute(group.get(), "panels", m.layout.panels, kOp, m.path);
    hdf5::write_int_attribute(group.get(), "panel_rows", m.layout.rows, kOp, m.path);
    hdf5::write_int_attribute(group.get(), "panel_cols", m.layout.cols, kOp, m.path);
  }
  m.counts.reset();
  m.frame_indices.reset();
  for (auto& c : m.columns) c.reset();
  if (!m.file.close()) hdf5::fail(kOp, m.path, "cannot close (flush) the HDF5 file");
  m.temp.commit();
  m.closed = true;
}

int64_t CxiWriter::frames() const { return impl_->frames; }
int64_t CxiWriter::peaks_written() const { return impl_->peaks; }
int64_t CxiWriter::truncated_frames() const { return impl_->truncated; }
const std::string& CxiWriter::path() const { return impl_->path; }

}  // namespace mixprec::stream
