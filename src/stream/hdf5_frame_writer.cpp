#include "hdf5_handle.h"
#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/stream/hdf5_frames.h"

namespace mixprec::stream {
namespace {

constexpr const char* kOp = "hdf5";
constexpr const char* kTruth = "/entry_1/ground_truth";
constexpr hsize_t kTruthChunk = 4096;

enum TruthColumn { kFrame, kPanel, kX, kY, kIntensity, kSigma, kSnr, kTruthColumns };
constexpr const char* kTruthNames[kTruthColumns] = {"frame", "panel", "x", "y", "intensity", "sigma", "snr"};

// A fixed-size dataset written at once (the mask, the geometry), parent groups created.
void write_fixed(hid_t file, const std::string& path, hid_t file_type, hid_t memory_type,
                 const std::vector<hsize_t>& dims, const void* data, const std::string& file_path) {
  hdf5::Handle space = hdf5::check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                      H5Sclose, kOp, file_path, "H5Screate_simple");
  hdf5::Handle links = hdf5::check_id(H5Pcreate(H5P_LINK_CREATE), H5Pclose, kOp, file_path, "H5Pcreate");
  H5Pset_create_intermediate_group(links.get(), 1);
  hdf5::Handle ds = hdf5::check_id(H5Dcreate2(file, path.c_str(), file_type, space.get(), links.get(),
                                              H5P_DEFAULT, H5P_DEFAULT),
                                   H5Dclose, kOp, file_path, "cannot create " + path);
  hdf5::check_status(H5Dwrite(ds.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), kOp,
                     file_path, "cannot write " + path);
}

}  // namespace

struct Hdf5FrameWriter::Impl {
  std::string path;
  DetectorGeometry geometry;
  io::AtomicFile temp;
  hdf5::Handle file, data;
  hdf5::Handle truth[kTruthColumns];
  int64_t frames = 0;
  bool closed = false;

  Impl(std::string p, const DetectorGeometry& g) : path(std::move(p)), geometry(g), temp(path, kOp) {}
};

Hdf5FrameWriter::Hdf5FrameWriter(std::string path, const DetectorGeometry& geometry,
                                 const std::vector<uint8_t>& bad_pixel_mask, Hdf5FrameWriterOptions options) {
  geometry.validate();
  MIXPREC_CHECK(bad_pixel_mask.empty() || static_cast<int64_t>(bad_pixel_mask.size()) == geometry.pixels(),
                "[", kOp, "] ", path, ": a mask of ", bad_pixel_mask.size(), " pixels for frames of ",
                geometry.pixels());
  MIXPREC_CHECK(options.deflate >= 0 && options.deflate <= 9, "[", kOp, "] deflate must be in [0, 9]");
  hdf5::silence_errors();
  impl_ = std::make_unique<Impl>(std::move(path), geometry);
  Impl& m = *impl_;
  m.file = hdf5::check_id(H5Fcreate(m.temp.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                          H5Fclose, kOp, m.path, "cannot create the HDF5 file");
  const auto P = static_cast<hsize_t>(geometry.panels), H = static_cast<hsize_t>(geometry.rows),
             W = static_cast<hsize_t>(geometry.cols);
  // One panel: [N, H, W] as single-module files are; several: [N, P, H, W].
  std::vector<hsize_t> frame_dims = P == 1 ? std::vector<hsize_t>{H, W} : std::vector<hsize_t>{P, H, W};
  std::vector<hsize_t> dims = frame_dims, chunk = frame_dims;
  dims.insert(dims.begin(), 0);
  chunk.insert(chunk.begin(), 1);
  m.data = hdf5::create_extendible(m.file.get(), std::string(kDefaultFrameDataset), H5T_STD_U16LE, dims,
                                   chunk, options.deflate, kOp, m.path);
  if (!bad_pixel_mask.empty())
    write_fixed(m.file.get(), std::string(kMaskDataset), H5T_STD_U8LE, H5T_NATIVE_UINT8, frame_dims,
                bad_pixel_mask.data(), m.path);
  std::vector<double> xs, ys;
  for (const PanelPlacement& p : geometry.placement) xs.push_back(p.origin_x), ys.push_back(p.origin_y);
  const std::string detector = "/entry_1/instrument_1/detector_1";
  write_fixed(m.file.get(), detector + "/panel_origin_x", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {P}, xs.data(), m.path);
  write_fixed(m.file.get(), detector + "/panel_origin_y", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {P}, ys.data(), m.path);
  {
    hdf5::Handle group = hdf5::check_id(H5Gopen2(m.file.get(), detector.c_str(), H5P_DEFAULT), H5Gclose,
                                        kOp, m.path, "H5Gopen2");
    hdf5::write_string_attribute(group.get(), "name", geometry.name, kOp, m.path);
  }
  for (int c = 0; c < kTruthColumns; ++c) {
    const hid_t type = c == kFrame ? H5T_STD_I64LE : c == kPanel ? H5T_STD_I32LE : H5T_IEEE_F32LE;
    m.truth[c] = hdf5::create_extendible(m.file.get(), std::string(kTruth) + "/" + kTruthNames[c], type,
                                         {0}, {kTruthChunk}, 0, kOp, m.path);
  }
}

Hdf5FrameWriter::~Hdf5FrameWriter() = default;

void Hdf5FrameWriter::append(std::span<const uint16_t> frame, std::span<const TruePeak> truth) {
  Impl& m = *impl_;
  MIXPREC_CHECK(!m.closed, "[", kOp, "] ", m.path, ": append after close");
  MIXPREC_CHECK(static_cast<int64_t>(frame.size()) == m.geometry.pixels(), "[", kOp, "] ", m.path,
                ": a frame of ", frame.size(), " values, expected ", m.geometry.pixels());
  hdf5::append_rows(m.data.get(), H5T_NATIVE_UINT16, 1, frame.data(), kOp, m.path);
  if (!truth.empty()) {
    const std::size_t n = truth.size();
    std::vector<int64_t> index(n, m.frames);
    std::vector<int32_t> panel(n);
    std::vector<float> x(n), y(n), intensity(n), sigma(n), snr(n);
    for (std::size_t i = 0; i < n; ++i) {
      MIXPREC_CHECK(truth[i].panel >= 0 && truth[i].panel < m.geometry.panels, "[", kOp, "] ", m.path,
                    ": a true peak on panel ", truth[i].panel);
      panel[i] = truth[i].panel, x[i] = truth[i].x, y[i] = truth[i].y;
      intensity[i] = truth[i].intensity_adu, sigma[i] = truth[i].sigma, snr[i] = truth[i].snr;
    }
    const auto rows = static_cast<hsize_t>(n);
    hdf5::append_rows(m.truth[kFrame].get(), H5T_NATIVE_INT64, rows, index.data(), kOp, m.path);
    hdf5::append_rows(m.truth[kPanel].get(), H5T_NATIVE_INT32, rows, panel.data(), kOp, m.path);
    const std::vector<float>* floats[] = {&x, &y, &intensity, &sigma, &snr};
    for (int c = kX; c < kTruthColumns; ++c)
      hdf5::append_rows(m.truth[c].get(), H5T_NATIVE_FLOAT, rows, floats[c - kX]->data(), kOp, m.path);
  }
  ++m.frames;
}

void Hdf5FrameWriter::set_attribute(const std::string& name, const std::string& value) {
  Impl& m = *impl_;
  MIXPREC_CHECK(!m.closed, "[", kOp, "] ", m.path, ": set_attribute after close");
  hdf5::Handle group = hdf5::check_id(H5Gopen2(m.file.get(), "/entry_1", H5P_DEFAULT), H5Gclose, kOp,
                                      m.path, "H5Gopen2");
  hdf5::write_string_attribute(group.get(), name, value, kOp, m.path);
}

void Hdf5FrameWriter::close() {
  Impl& m = *impl_;
  MIXPREC_CHECK(!m.closed, "[", kOp, "] ", m.path, ": closed twice");
  m.data.reset();
  for (auto& c : m.truth) c.reset();
  if (!m.file.close()) hdf5::fail(kOp, m.path, "cannot close (flush) the HDF5 file");
  m.temp.commit();
  m.closed = true;
}

int64_t Hdf5FrameWriter::frames() const { return impl_->frames; }
const std::string& Hdf5FrameWriter::path() const { return impl_->path; }

}  // namespace mixprec::stream
