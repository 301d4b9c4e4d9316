#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "hdf5_handle.h"
#include "mixprec/core/error.h"
#include "mixprec/core/forked_child.h"
#include "mixprec/stream/hdf5_frames.h"

namespace mixprec::stream {
namespace {

constexpr const char* kOp = "hdf5";
// Far beyond any detector (Jungfrau 16M is 2^24 pixels), small enough that a crafted shape
// cannot make the reader allocate more than a few GiB of staging.
constexpr int64_t kMaxFrameElements = int64_t{1} << 28;
constexpr int64_t kMaxTruthRows = int64_t{1} << 28;
constexpr const char* kGeometry = "/entry_1/instrument_1/detector_1";
constexpr const char* kTruth = "/entry_1/ground_truth";
// The probe's walk of the chunk index stops here: a crafted file may declare a billion chunks.
constexpr int64_t kMaxProbedChunks = int64_t{1} << 20;

// The sample type of an HDF5 datatype, or nothing when it is not one we read.
std::optional<SampleType> sample_type_of(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    switch (size) {
      case 1: return is_signed ? SampleType::I8 : SampleType::U8;
      case 2: return is_signed ? SampleType::I16 : SampleType::U16;
      case 4: return is_signed ? SampleType::I32 : SampleType::U32;
      case 8: if (is_signed) return SampleType::I64; break;
      default: break;
    }
  } else if (cls == H5T_FLOAT) {
    if (size == 4) return SampleType::F32;
    if (size == 8) return SampleType::F64;
  }
  return std::nullopt;
}

hid_t native_type(SampleType t) {
  switch (t) {
    case SampleType::U8: return H5T_NATIVE_UINT8;
    case SampleType::I8: return H5T_NATIVE_INT8;
    case SampleType::U16: return H5T_NATIVE_UINT16;
    case SampleType::I16: return H5T_NATIVE_INT16;
    case SampleType::U32: return H5T_NATIVE_UINT32;
    case SampleType::I32: return H5T_NATIVE_INT32;
    case SampleType::I64: return H5T_NATIVE_INT64;
    case SampleType::F32: return H5T_NATIVE_FLOAT;
    case SampleType::F64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_UINT8;
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Opens dataset `path` of `file`, or throws naming what is missing.
hdf5::Handle open_dataset(hid_t file, const std::string& path, const std::string& file_path) {
  if (!hdf5::path_exists(file, path))
    throw Error(std::string("[") + kOp + "] " + file_path + ": no dataset '" + path + "'");
  const hid_t id = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (id < 0) hdf5::fail(kOp, file_path, "'" + path + "' is not a readable dataset");
  return hdf5::Handle(id, H5Dclose);
}

std::vector<hsize_t> dataset_dims(hid_t dataset, const std::string& path, const std::string& file_path) {
  hdf5::Handle space = hdf5::check_id(H5Dget_space(dataset), H5Sclose, kOp, file_path,
                                      "cannot read the shape of '" + path + "'");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) hdf5::fail(kOp, file_path, "cannot read the rank of '" + path + "'");
  if (rank > 32) throw Error(std::string("[") + kOp + "] " + file_path + ": '" + path + "' has rank " + std::to_string(rank));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    hdf5::fail(kOp, file_path, "cannot read the shape of '" + path + "'");
  return dims;
}

// A whole 1-D dataset of `expected` rows (or any, when -1) as T through `memory_type`.
template <typename T>
std::vector<T> read_column(hid_t file, const std::string& path, hid_t memory_type, int64_t expected,
                           const std::string& file_path) {
  hdf5::Handle ds = open_dataset(file, path, file_path);
  const std::vector<hsize_t> dims = dataset_dims(ds.get(), path, file_path);
  const auto rows = dims.size() == 1 ? static_cast<int64_t>(dims[0]) : -1;
  if (dims.size() != 1 || rows > kMaxTruthRows || (expected >= 0 && rows != expected))
    throw Error(std::string("[") + kOp + "] " + file_path + ": '" + path + "' has shape " +
                dims_text(dims) + ", expected " +
                (expected >= 0 ? "[" + std::to_string(expected) + "]" : std::string("one dimension")));
  hdf5::Handle type = hdf5::check_id(H5Dget_type(ds.get()), H5Tclose, kOp, file_path, "H5Dget_type");
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    throw Error(std::string("[") + kOp + "] " + file_path + ": '" + path + "' is not numeric");
  std::vector<T> values(static_cast<std::size_t>(rows));
  if (rows > 0)
    hdf5::check_status(H5Dread(ds.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), kOp,
                       file_path, "cannot read '" + path + "'");
  return values;
}

// Looks every chunk of `dataset` (of shape `dims`, when it is chunked) up in its chunk index:
// the B-tree nodes a read of that chunk walks, with no data read. At most kMaxProbedChunks,
// in row-major order. What libhdf5 refuses here is refused again when the frame is read.
void look_up_every_chunk(hid_t dataset, const std::vector<hsize_t>& dims) {
  const hdf5::Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> chunk(dims.size()), at(dims.size(), 0);
  const auto empty = [](const std::vector<hsize_t>& v) { return std::find(v.begin(), v.end(), hsize_t{0}) != v.end(); };
  if (plist.valid() && H5Pget_layout(plist.get()) == H5D_CHUNKED &&
      H5Pget_chunk(plist.get(), rank, chunk.data()) == rank && !empty(chunk) && !empty(dims)) {
    for (int64_t looked = 0; looked < kMaxProbedChunks; ++looked) {
      hsize_t bytes = 0;
      (void)H5Dget_chunk_storage_size(dataset, at.data(), &bytes);
      int d = rank - 1;  // on to the next chunk: the last axis fastest
      for (; d >= 0; --d) {
        at[d] += chunk[d];
        if (at[d] < dims[d]) break;
        at[d] = 0;
      }
      if (d < 0) break;
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace

std::pair<std::string, std::string> split_frame_source(std::string_view spec) {
  const std::size_t at = spec.rfind(":/");
  if (at == std::string_view::npos || at == 0)
    return {std::string(spec), std::string(kDefaultFrameDataset)};
  return {std::string(spec.substr(0, at)), std::string(spec.substr(at + 1))};
}

struct Hdf5FrameReader::Impl {
  std::string file_path, dataset_path;
  hdf5::Handle file, dataset, file_space;
  int64_t frames = 0, panels = 1, rows = 0, cols = 0;
  bool has_panel_axis = false;
  SampleType type = SampleType::U16;
  std::vector<std::byte> staging;  // one frame in the file's type
};

void probe_hdf5_frames(std::string_view spec, const Hdf5ReadOptions& options) {
  if (options.probe == Hdf5Probe::Off) return;
  // An Error in the child (a file the reader refuses) is an exit too: the parent then opens
  // the file and reports that Error itself.
  const ChildOutcome outcome = run_in_forked_child(
      [&] {
        Hdf5FrameReader reader(spec, {.probe = Hdf5Probe::Off});
        reader.read_through(options.probe);
        return 0;
      },
      options.probe_timeout);
  if (outcome.exited()) return;
  const std::string file = split_frame_source(spec).first;
  const std::string how = " (a probe process " + outcome.describe(options.probe_timeout) +
                          "); the file was not opened in this process";
  if (outcome.crash_signal() || outcome.end == ChildOutcome::End::TimedOut)
    throw Error(std::string("[") + kOp + "] " + file + ": corrupt HDF5 file: libhdf5 " +
                (outcome.crash_signal() ? "crashed" : "did not finish") + " reading it" + how);
  // Killed from outside (the OOM killer, a SIGTERM): the file may be sound.
  throw Error(std::string("[") + kOp + "] " + file + ": could not be checked" + how);
}

// Each part on its own, as the pipeline would reach it even when an earlier one is refused: a
// bad mask must not keep the frames from being probed.
void Hdf5FrameReader::read_through(Hdf5Probe depth) {
  Impl& m = *impl_;
  const auto attempt = [](auto&& part) {
    try {
      part();
    } catch (const Error&) {
    }
  };
  attempt([&] { (void)bad_pixel_mask(); });
  attempt([&] { (void)geometry(); });
  attempt([&] { (void)ground_truth(); });
  // Only read_raw below, never read(): the child must not use the thread pool (convert).
  std::vector<hsize_t> dims = {static_cast<hsize_t>(m.frames), static_cast<hsize_t>(m.rows),
                               static_cast<hsize_t>(m.cols)};
  if (m.has_panel_axis) dims.insert(dims.begin() + 1, static_cast<hsize_t>(m.panels));
  look_up_every_chunk(m.dataset.get(), dims);
  if (m.frames == 0) return;
  if (depth == Hdf5Probe::AllFrames) {
    for (int64_t i = 0; i < m.frames; ++i) attempt([&] { (void)read_raw(i); });
  } else {
    attempt([&] { (void)read_raw(0); });
    attempt([&] { (void)read_raw(m.frames - 1); });
  }
}

Hdf5FrameReader::Hdf5FrameReader(std::string_view spec, const Hdf5ReadOptions& options)
    : impl_(std::make_unique<Impl>()) {
  probe_hdf5_frames(spec, options);
  Impl& m = *impl_;
  std::tie(m.file_path, m.dataset_path) = split_frame_source(spec);
  hdf5::silence_errors();
  // Checked first: HDF5's own message for a missing file is a page of internals.
  if (::access(m.file_path.c_str(), R_OK) != 0)
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": cannot read the file: " + std::strerror(errno));
  if (std::filesystem::is_directory(m.file_path))
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": is a directory, expected an HDF5 file");
  m.file = hdf5::check_id(H5Fopen(m.file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, kOp,
                          m.file_path, "not a readable HDF5 file (truncated or corrupt?)");
  m.dataset = open_dataset(m.file.get(), m.dataset_path, m.file_path);
  {
    hdf5::Handle type = hdf5::check_id(H5Dget_type(m.dataset.get()), H5Tclose, kOp, m.file_path,
                                       "cannot read the element type of '" + m.dataset_path + "'");
    const std::optional<SampleType> t = sample_type_of(type.get());
    if (!t)
      throw Error(std::string("[") + kOp + "] " + m.file_path + ": '" + m.dataset_path +
                  "' has an unsupported element type (class " + std::to_string(H5Tget_class(type.get())) +
                  ", " + std::to_string(H5Tget_size(type.get())) +
                  " bytes); expected u8, i8, u16, i16, u32, i32, i64, f32 or f64");
    m.type = *t;
  }
  const std::vector<hsize_t> dims = dataset_dims(m.dataset.get(), m.dataset_path, m.file_path);
  if (dims.size() != 3 && dims.size() != 4)
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": '" + m.dataset_path + "' has shape " +
                dims_text(dims) + ", expected [frames, rows, cols] or [frames, panels, rows, cols]");
  m.has_panel_axis = dims.size() == 4;
  m.frames = static_cast<int64_t>(dims[0]);
  m.panels = m.has_panel_axis ? static_cast<int64_t>(dims[1]) : 1;
  m.rows = static_cast<int64_t>(dims[dims.size() - 2]);
  m.cols = static_cast<int64_t>(dims[dims.size() - 1]);
  const bool sane = m.frames >= 0 && m.panels >= 1 && m.rows >= 1 && m.cols >= 1 &&
                    m.panels <= kMaxFrameElements && m.rows <= kMaxFrameElements &&
                    m.cols <= kMaxFrameElements &&
                    m.rows * m.cols <= kMaxFrameElements &&
                    m.panels * m.rows * m.cols <= kMaxFrameElements;
  if (!sane)
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": '" + m.dataset_path + "' has shape " +
                dims_text(dims) + ": a frame must be non-empty and at most 2^28 elements");
  m.file_space = hdf5::check_id(H5Dget_space(m.dataset.get()), H5Sclose, kOp, m.file_path, "H5Dget_space");
  m.staging.resize(static_cast<std::size_t>(frame_elements()) * sample_size(m.type));
}

Hdf5FrameReader::~Hdf5FrameReader() = default;
Hdf5FrameReader::Hdf5FrameReader(Hdf5FrameReader&&) noexcept = default;
Hdf5FrameReader& Hdf5FrameReader::operator=(Hdf5FrameReader&&) noexcept = default;

const std::string& Hdf5FrameReader::file_path() const { return impl_->file_path; }
const std::string& Hdf5FrameReader::dataset_path() const { return impl_->dataset_path; }
int64_t Hdf5FrameReader::frames() const { return impl_->frames; }
int64_t Hdf5FrameReader::panels() const { return impl_->panels; }
int64_t Hdf5FrameReader::rows() const { return impl_->rows; }
int64_t Hdf5FrameReader::cols() const { return impl_->cols; }
SampleType Hdf5FrameReader::sample_type() const { return impl_->type; }

void Hdf5FrameReader::read(int64_t index, void* dst, DType dst_type) {
  MIXPREC_CHECK(dst != nullptr, "[", kOp, "] no destination buffer");
  const std::span<const std::byte> raw = read_raw(index);
  convert_samples(raw.data(), impl_->type, dst, dst_type, static_cast<std::size_t>(frame_elements()));
}

std::span<const std::byte> Hdf5FrameReader::read_raw(int64_t index) {
  Impl& m = *impl_;
  MIXPREC_CHECK(index >= 0 && index < m.frames, "[", kOp, "] ", m.file_path, ": frame ", index,
                " out of range (the dataset has ", m.frames, ")");
  std::vector<hsize_t> offset = {static_cast<hsize_t>(index), 0, 0};
  std::vector<hsize_t> count = {1, static_cast<hsize_t>(m.rows), static_cast<hsize_t>(m.cols)};
  if (m.has_panel_axis) {
    offset.push_back(0);
    count.insert(count.begin() + 1, static_cast<hsize_t>(m.panels));
  }
  hdf5::check_status(H5Sselect_hyperslab(m.file_space.get(), H5S_SELECT_SET, offset.data(), nullptr,
                                         count.data(), nullptr),
                     kOp, m.file_path, "cannot select frame " + std::to_string(index));
  // The memory space has the selection's own shape: with a flat one HDF5 takes its general
  // (element-by-element) path, several times slower than the contiguous copy.
  hdf5::Handle memory = hdf5::check_id(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                                       H5Sclose, kOp, m.file_path, "H5Screate_simple");
  hdf5::check_status(H5Dread(m.dataset.get(), native_type(m.type), memory.get(), m.file_space.get(),
                             H5P_DEFAULT, m.staging.data()),
                     kOp, m.file_path,
                     "cannot read frame " + std::to_string(index) + " of '" + m.dataset_path +
                         "' (truncated or corrupt file?)");
  return {m.staging.data(), m.staging.size()};
}

std::vector<uint8_t> Hdf5FrameReader::bad_pixel_mask() const {
  const Impl& m = *impl_;
  const std::string path(kMaskDataset);
  if (!hdf5::path_exists(m.file.get(), path)) return {};
  hdf5::Handle ds = open_dataset(m.file.get(), path, m.file_path);
  const std::vector<hsize_t> dims = dataset_dims(ds.get(), path, m.file_path);
  const bool flat = dims.size() == 2 && m.panels == 1 && static_cast<int64_t>(dims[0]) == m.rows &&
                    static_cast<int64_t>(dims[1]) == m.cols;
  const bool stacked = dims.size() == 3 && static_cast<int64_t>(dims[0]) == m.panels &&
                       static_cast<int64_t>(dims[1]) == m.rows && static_cast<int64_t>(dims[2]) == m.cols;
  if (!flat && !stacked)
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": mask '" + path + "' has shape " +
                dims_text(dims) + ", expected the frame's [" + (m.panels > 1 ? std::to_string(m.panels) + ", " : "") +
                std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]");
  hdf5::Handle type = hdf5::check_id(H5Dget_type(ds.get()), H5Tclose, kOp, m.file_path, "H5Dget_type");
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": mask '" + path + "' is not an integer dataset");
  std::vector<int32_t> values(static_cast<std::size_t>(frame_elements()));
  hdf5::check_status(H5Dread(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
                     kOp, m.file_path, "cannot read the mask");
  std::vector<uint8_t> bad(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bad[i] = values[i] != 0;
  return bad;
}

std::optional<DetectorGeometry> Hdf5FrameReader::geometry() const {
  const Impl& m = *impl_;
  const std::string base = kGeometry;
  if (!hdf5::path_exists(m.file.get(), base + "/panel_origin_x")) return std::nullopt;
  const std::vector<double> xs = read_column<double>(m.file.get(), base + "/panel_origin_x",
                                                     H5T_NATIVE_DOUBLE, m.panels, m.file_path);
  const std::vector<double> ys = read_column<double>(m.file.get(), base + "/panel_origin_y",
                                                     H5T_NATIVE_DOUBLE, m.panels, m.file_path);
  DetectorGeometry g;
  g.name = "file";
  g.panels = m.panels, g.rows = m.rows, g.cols = m.cols;
  for (std::size_t p = 0; p < xs.size(); ++p) g.placement.push_back({xs[p], ys[p]});
  // The name is a label only: a missing or odd attribute leaves "file".
  hdf5::Handle group(H5Gopen2(m.file.get(), kGeometry, H5P_DEFAULT), H5Gclose);
  if (group.valid() && H5Aexists(group.get(), "name") > 0) {
    hdf5::Handle attr(H5Aopen(group.get(), "name", H5P_DEFAULT), H5Aclose);
    hdf5::Handle type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID, H5Tclose);
    if (type.valid() && H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) == 0) {
      const std::size_t size = H5Tget_size(type.get());
      if (size > 0 && size <= 256) {
        std::string name(size, '\0');
        if (H5Aread(attr.get(), type.get(), name.data()) >= 0) g.name = name.substr(0, name.find('\0'));
      }
    }
  }
  H5Eclear2(H5E_DEFAULT);
  try {
    g.validate();
  } catch (const Error& e) {
    throw Error(std::string("[") + kOp + "] " + m.file_path + ": bad geometry: " + e.what());
  }
  return g;
}

std::optional<std::vector<std::vector<TruePeak>>> Hdf5FrameReader::ground_truth() const {
  const Impl& m = *impl_;
  const std::string base = kTruth;
  if (!hdf5::path_exists(m.file.get(), base + "/frame")) return std::nullopt;
  const hid_t f = m.file.get();
  const std::vector<int64_t> frame = read_column<int64_t>(f, base + "/frame", H5T_NATIVE_INT64, -1, m.file_path);
  const auto rows = static_cast<int64_t>(frame.size());
  const std::vector<int32_t> panel = read_column<int32_t>(f, base + "/panel", H5T_NATIVE_INT32, rows, m.file_path);
  const std::vector<float> x = read_column<float>(f, base + "/x", H5T_NATIVE_FLOAT, rows, m.file_path);
  const std::vector<float> y = read_column<float>(f, base + "/y", H5T_NATIVE_FLOAT, rows, m.file_path);
  const std::vector<float> intensity = read_column<float>(f, base + "/intensity", H5T_NATIVE_FLOAT, rows, m.file_path);
  const std::vector<float> sigma = read_column<float>(f, base + "/sigma", H5T_NATIVE_FLOAT, rows, m.file_path);
  const std::vector<float> snr = read_column<float>(f, base + "/snr", H5T_NATIVE_FLOAT, rows, m.file_path);
  std::vector<std::vector<TruePeak>> truth(static_cast<std::size_t>(m.frames));
  for (std::size_t i = 0; i < frame.size(); ++i) {
    if (frame[i] < 0 || frame[i] >= m.frames || panel[i] < 0 || panel[i] >= m.panels ||
        !std::isfinite(x[i]) || !std::isfinite(y[i]))
      throw Error(std::string("[") + kOp + "] " + m.file_path + ": ground-truth row " + std::to_string(i) +
                  " (frame " + std::to_string(frame[i]) + ", panel " + std::to_string(panel[i]) +
                  ") is outside the " + std::to_string(m.frames) + " frames of " +
                  std::to_string(m.panels) + " panels");
    truth[static_cast<std::size_t>(frame[i])].push_back({panel[i], x[i], y[i], intensity[i], sigma[i], snr[i]});
  }
  return truth;
}

}  // namespace mixprec::stream
