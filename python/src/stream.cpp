// mixprec.stream: the Bragg-peak finders of `mixprec stream run` (stream/, models/peaknet*.h)
// on numpy frames. python/mixprec/stream.py presents them; docs/PYTHON.md, "Stream".
//
// A frame reaches the finder the way `stream run` hands it over: converted once from its
// element type into the finder's working dtype (f32 for the classical finder, the network's
// input dtype for PeakNet: uint16 straight into bf16 for bf16 at the source), or, when it is
// already in that dtype, not converted at all: the finder reads the caller's memory.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "bindings.h"
#include "mixprec/core/error.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/models/peaknet.h"
#include "mixprec/models/peaknet_train.h"
#include "mixprec/stream/classic_finder.h"
#include "mixprec/stream/detector.h"
#include "mixprec/stream/hdf5_frames.h"
#include "mixprec/stream/peaks.h"
#include "mixprec/stream/sample_types.h"
#include "mixprec/stream/synthetic_frames.h"

namespace mixprec::python {
namespace {

using stream::DetectorGeometry;
using stream::Peak;
using stream::SampleType;
using stream::TruePeak;
using Release = nb::call_guard<nb::gil_scoped_release>;
using InputArray = nb::ndarray<nb::ro, nb::device::cpu>;
using NumpyArray = nb::ndarray<nb::numpy>;
namespace dl = nb::dlpack;

// ---- element types: numpy's (DLPack codes) <-> the detector sample types and mixprec dtypes ----

// What a frame's elements are: a detector sample type (uint16 raw, float32 calibrated, ...) or
// one of mixprec's 16-bit floats (a bf16 mixprec or torch tensor, float16 numpy).
using Elements = std::variant<SampleType, DType>;

struct ElementCode {
  Elements elements;
  dl::dtype code;
};
const ElementCode kElementCodes[] = {
    {SampleType::U8, {uint8_t(dl::dtype_code::UInt), 8, 1}},
    {SampleType::I8, {uint8_t(dl::dtype_code::Int), 8, 1}},
    {SampleType::U16, {uint8_t(dl::dtype_code::UInt), 16, 1}},
    {SampleType::I16, {uint8_t(dl::dtype_code::Int), 16, 1}},
    {SampleType::U32, {uint8_t(dl::dtype_code::UInt), 32, 1}},
    {SampleType::I32, {uint8_t(dl::dtype_code::Int), 32, 1}},
    {SampleType::I64, {uint8_t(dl::dtype_code::Int), 64, 1}},
    {SampleType::F32, {uint8_t(dl::dtype_code::Float), 32, 1}},
    {SampleType::F64, {uint8_t(dl::dtype_code::Float), 64, 1}},
    {DType::F16, {uint8_t(dl::dtype_code::Float), 16, 1}},
    {DType::BF16, {uint8_t(dl::dtype_code::Bfloat), 16, 1}},
};

std::string elements_name(const Elements& e) {
  if (const auto* s = std::get_if<SampleType>(&e)) return std::string(stream::sample_type_name(*s));
  return std::string(dtype_name(std::get<DType>(e)));
}
std::size_t elements_size(const Elements& e) {
  if (const auto* s = std::get_if<SampleType>(&e)) return stream::sample_size(*s);
  return dtype_size(std::get<DType>(e));
}
// The same values without a conversion: a sample type DType has, or the dtype itself.
std::optional<DType> elements_dtype(const Elements& e) {
  if (const auto* s = std::get_if<SampleType>(&e)) return stream::sample_dtype(*s);
  return std::get<DType>(e);
}

Elements elements_of(dl::dtype code) {
  for (const ElementCode& c : kElementCodes)
    if (c.code == code) return c.elements;
  throw nb::type_error(
      "[stream] frames must be uint8, int8, uint16, int16, uint32, int32, int64, float16, "
      "float32, float64 or bfloat16 (a bf16 mixprec or torch tensor)");
}
dl::dtype code_of(SampleType type) {
  for (const ElementCode& c : kElementCodes)
    if (c.elements == Elements(type)) return c.code;
  throw Error("[stream] no array type for sample type " + std::string(stream::sample_type_name(type)));
}

// n elements from `src` (any alignment) into `dst` of `dst_type`, each rounded once.
void convert_elements(const void* src, const Elements& from, void* dst, DType dst_type, std::size_t n) {
  if (const auto* s = std::get_if<SampleType>(&from))
    stream::convert_samples(src, *s, dst, dst_type, n);
  else
    kernels::convert(src, std::get<DType>(from), dst, dst_type, n);
}

// A vector handed to numpy without a copy: the array owns it through a capsule.
template <typename T>
NumpyArray owned_array(std::vector<T> values, std::initializer_list<std::size_t> shape,
                       dl::dtype dtype) {
  auto* owned = new std::vector<T>(std::move(values));
  if (owned->empty()) owned->reserve(1);  // a valid pointer even for no elements
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return NumpyArray(owned->data(), shape.size(), shape.begin(), owner, nullptr, dtype);
}

// Records as rows of bytes ([n, sizeof(T)] uint8): python/mixprec/stream.py views them as a
// structured array whose fields stream_layout() describes.
template <typename T>
nb::object record_array(std::vector<T> records) {
  const std::size_t n = records.size();
  return owned_array(std::move(records), {n, sizeof(T)}, nb::dtype<uint8_t>()).cast();
}

// ---- frames in ----

// A batch of frames as the caller passed them: [B, P, H, W] elements, contiguous.
struct Frames {
  const void* data = nullptr;
  Elements elements = SampleType::U16;
  int64_t count = 0;
};

// Checks an array against the detector: [P, H, W] (or [H, W] for one panel) for one frame,
// [B, P, H, W] (or [B, H, W] for one panel) for a batch; C-contiguous.
Frames frames_arg(const InputArray& a, const DetectorGeometry& g, bool batch) {
  Frames f;
  f.elements = elements_of(a.dtype());
  const auto ndim = static_cast<int64_t>(a.ndim());
  const int64_t lead = batch ? 1 : 0;  // dims before the frame's own
  const bool panel_dim = ndim == lead + 3;
  auto shape_text = [&] {
    std::string s = "[";
    for (int64_t d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
    return s + "]";
  };
  const std::string want =
      std::string(batch ? "[B, " : "[") + std::to_string(g.panels) + ", " + std::to_string(g.rows) +
      ", " + std::to_string(g.cols) + "]" +
      (g.panels == 1 ? std::string(batch ? " or [B, " : " or [") + std::to_string(g.rows) + ", " +
                           std::to_string(g.cols) + "]"
                     : std::string());
  const bool fits =
      (panel_dim || (ndim == lead + 2 && g.panels == 1)) &&
      (!panel_dim || static_cast<int64_t>(a.shape(lead)) == g.panels) &&
      static_cast<int64_t>(a.shape(ndim - 2)) == g.rows && static_cast<int64_t>(a.shape(ndim - 1)) == g.cols;
  if (!fits)
    throw nb::value_error(("[stream] expected " + std::string(batch ? "frames " : "a frame ") + want +
                           " for the detector '" + g.name + "', got " + shape_text())
                              .c_str());
  int64_t expected = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    if (a.shape(d) != 1 && a.stride(d) != expected)
      throw nb::value_error(
          "[stream] frames must be C-contiguous (mixprec.stream.PeakFinder makes a contiguous "
          "copy of a numpy view; pass other arrays with .contiguous())");
    expected *= static_cast<int64_t>(a.shape(d));
  }
  f.data = a.data();
  f.count = batch ? static_cast<int64_t>(a.shape(0)) : 1;
  return f;
}

std::vector<uint8_t> mask_arg(nb::handle mask, const DetectorGeometry& g) {
  if (mask.is_none()) return {};
  const auto a = nb::cast<nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>>(mask);
  MIXPREC_CHECK(static_cast<int64_t>(a.size()) == g.pixels(), "[stream] a bad-pixel mask of ",
                a.size(), " pixels for the detector '", g.name, "' of ", g.pixels());
  const auto* p = static_cast<const uint8_t*>(a.data());
  return std::vector<uint8_t>(p, p + a.size());
}

// ---- the finders ----

// One of the two finders of `stream run`, with the conversion of frames into its working dtype.
// The classical finder is const and runs on several threads at once; the network keeps its
// activations and masks between calls, so its calls take turns (a mutex).
class FrameFinder {
 public:
  FrameFinder(DetectorGeometry geometry, std::vector<uint8_t> bad_pixels,
              const stream::ClassicFinderOptions& options)
      : geometry_(std::move(geometry)), classic_(std::in_place, geometry_, std::move(bad_pixels), options) {}

  FrameFinder(const std::string& model_path, models::NetPrecision precision, DetectorGeometry geometry,
              std::vector<uint8_t> bad_pixels, const stream::MaskPeakOptions& options)
      : geometry_(std::move(geometry)), net_(models::load_peaknet(model_path)), precision_(precision) {
    geometry_.validate();
    MIXPREC_CHECK(bad_pixels.empty() || static_cast<int64_t>(bad_pixels.size()) == geometry_.pixels(),
                  "[stream] a bad-pixel mask of ", bad_pixels.size(), " pixels for a detector of ",
                  geometry_.pixels());
    // min_pixels 0 and small_peak_snr < 0: the model file's peak rule, as `stream run` without
    // --min-pixels and --small-peak-snr.
    const models::PeakNetConfig& c = net_->config();
    net_->set_peak_rule(c.threshold, options.min_pixels > 0 ? options.min_pixels : c.min_pixels,
                        options.small_peak_snr >= 0 ? options.small_peak_snr : c.small_peak_snr);
    net_finder_.emplace(*net_, precision, geometry_, std::move(bad_pixels), options);
  }

  const DetectorGeometry& geometry() const { return geometry_; }
  bool is_net() const { return net_ != nullptr; }
  DType input_dtype() const { return is_net() ? net_finder_->input_dtype() : DType::F32; }
  std::optional<std::string> precision() const {
    if (!is_net()) return std::nullopt;
    return std::string(models::net_precision_name(precision_));
  }

  // One peak list per frame. Called without the GIL.
  std::vector<std::vector<Peak>> find(const Frames& frames) {
    const DType work = input_dtype();
    const int64_t per_frame = geometry_.pixels();
    const std::size_t in_size = elements_size(frames.elements);
    // The caller's memory is read as it is when it holds the working dtype, aligned.
    const bool zero_copy = elements_dtype(frames.elements) == work &&
                           reinterpret_cast<std::uintptr_t>(frames.data) % dtype_size(work) == 0;
    std::vector<std::vector<Peak>> peaks;
    if (frames.count == 0) return peaks;
    const void* read_from = frames.data;
    if (is_net()) {
      Tensor batch;
      const Shape shape = {frames.count, geometry_.panels, geometry_.rows, geometry_.cols};
      if (zero_copy) {
        // Borrowed for the call: the finder only reads its input, and the caller's array
        // outlives the call.
        batch = Tensor::from_blob(const_cast<void*>(frames.data), shape, contiguous_strides(shape),
                                  work, nullptr);
      } else {
        batch = Tensor::empty(shape, work);
        convert_elements(frames.data, frames.elements, batch.data_ptr(), work,
                         static_cast<std::size_t>(frames.count * per_frame));
      }
      read_from = batch.data_ptr();
      const std::lock_guard lock(net_mutex_);
      peaks = net_finder_->find(batch);
    } else {
      std::vector<float> converted;
      if (!zero_copy) converted.resize(static_cast<std::size_t>(per_frame));
      for (int64_t i = 0; i < frames.count; ++i) {
        const void* frame = static_cast<const std::byte*>(frames.data) + i * per_frame * in_size;
        if (!zero_copy) {
          convert_elements(frame, frames.elements, converted.data(), DType::F32,
                           static_cast<std::size_t>(per_frame));
          frame = converted.data();
        }
        if (i == 0) read_from = frame;
        peaks.push_back(classic_->find(static_cast<const float*>(frame)));
      }
    }
    const std::lock_guard lock(last_mutex_);
    last_address_ = reinterpret_cast<std::uintptr_t>(read_from);
    last_conversion_ = zero_copy ? std::nullopt
                                 : std::optional<std::string>(elements_name(frames.elements) + " -> " +
                                                              std::string(dtype_name(work)));
    return peaks;
  }

  // Where the finder read the last call's first frame, and the conversion that put it there
  // (none: the caller's own memory).
  std::pair<std::uintptr_t, std::optional<std::string>> last_input() const {
    const std::lock_guard lock(last_mutex_);
    return {last_address_, last_conversion_};
  }

 private:
  DetectorGeometry geometry_;
  std::optional<stream::ClassicPeakFinder> classic_;
  std::unique_ptr<models::PeakNet> net_;  // before net_finder_, which refers to it
  models::NetPrecision precision_ = models::NetPrecision::F32;
  std::optional<models::PeakNetFinder> net_finder_;
  std::mutex net_mutex_;
  mutable std::mutex last_mutex_;
  std::uintptr_t last_address_ = 0;
  std::optional<std::string> last_conversion_;
};

nb::list peak_lists(std::vector<std::vector<Peak>> lists) {
  nb::list out;
  for (std::vector<Peak>& l : lists) out.append(record_array(std::move(l)));
  return out;
}

nb::list find_frames(FrameFinder& finder, const InputArray& frames, bool batch) {
  const Frames f = frames_arg(frames, finder.geometry(), batch);
  std::vector<std::vector<Peak>> peaks;
  {
    nb::gil_scoped_release release;
    peaks = finder.find(f);
  }
  return peak_lists(std::move(peaks));
}

// ---- frame files and synthetic frames ----

NumpyArray mask_array(std::vector<uint8_t> mask, const DetectorGeometry& g) {
  return owned_array(std::move(mask),
                     {static_cast<std::size_t>(g.panels), static_cast<std::size_t>(g.rows),
                      static_cast<std::size_t>(g.cols)},
                     nb::dtype<uint8_t>());
}

// An HDF5 frame file (stream/hdf5_frames.h) with the detector it describes, as `stream run`
// reads it. libhdf5 is not thread-safe, so its calls keep the GIL.
class FrameFile {
 public:
  explicit FrameFile(const std::string& spec) : reader_(spec) {
    const std::optional<DetectorGeometry> stored = reader_.geometry();
    geometry_ = stored ? *stored
                       : stream::panel_centred_geometry(reader_.panels(), reader_.rows(), reader_.cols());
  }
  int64_t frames() const { return reader_.frames(); }
  const DetectorGeometry& geometry() const { return geometry_; }
  std::string sample_type() const { return std::string(stream::sample_type_name(reader_.sample_type())); }
  std::string path() const { return reader_.file_path(); }

  // Frame `index` in the file's own element type, [P, H, W].
  NumpyArray read(int64_t index) {
    MIXPREC_CHECK(index >= 0 && index < reader_.frames(), "[FrameFile] frame ", index,
                  " out of range for ", reader_.frames(), " frames");
    const std::span<const std::byte> raw = reader_.read_raw(index);
    std::vector<std::byte> bytes(raw.begin(), raw.end());
    const auto& g = geometry_;
    return owned_array(std::move(bytes),
                       {static_cast<std::size_t>(g.panels), static_cast<std::size_t>(g.rows),
                        static_cast<std::size_t>(g.cols)},
                       code_of(reader_.sample_type()));
  }
  nb::object bad_pixels() const {
    std::vector<uint8_t> mask = reader_.bad_pixel_mask();
    if (mask.empty()) return nb::none();
    return mask_array(std::move(mask), geometry_).cast();
  }
  nb::object ground_truth() const {
    auto truth = reader_.ground_truth();
    if (!truth) return nb::none();
    nb::list out;
    for (std::vector<TruePeak>& frame : *truth) out.append(record_array(std::move(frame)));
    return out;
  }

 private:
  mutable stream::Hdf5FrameReader reader_;
  DetectorGeometry geometry_;
};

// The synthetic detector of `stream produce --synthetic` (default settings).
class Synthetic {
 public:
  Synthetic(DetectorGeometry geometry, uint64_t seed) : detector_(std::move(geometry), {}, seed) {}
  const DetectorGeometry& geometry() const { return detector_.geometry(); }
  nb::object bad_pixels() const {
    return mask_array(detector_.bad_pixel_mask(), detector_.geometry()).cast();
  }
  // (uint16 ADU [P, H, W], true peaks) of frame `index`.
  std::pair<NumpyArray, nb::object> frame(int64_t index) const {
    MIXPREC_CHECK(index >= 0, "[SyntheticDetector] frame index must be >= 0, got ", index);
    stream::SyntheticFrame f;
    {
      nb::gil_scoped_release release;
      detector_.generate(index, f);
    }
    const DetectorGeometry& g = detector_.geometry();
    NumpyArray adu = owned_array(std::move(f.adu),
                                 {static_cast<std::size_t>(g.panels), static_cast<std::size_t>(g.rows),
                                  static_cast<std::size_t>(g.cols)},
                                 nb::dtype<uint16_t>());
    return {adu, record_array(std::move(f.peaks))};
  }

 private:
  stream::SyntheticDetector detector_;
};

DetectorGeometry make_geometry(int64_t panels, int64_t rows, int64_t cols,
                               const std::vector<std::pair<double, double>>& origins,
                               const std::string& name) {
  DetectorGeometry g{.name = name, .panels = panels, .rows = rows, .cols = cols, .placement = {}};
  for (const auto& [x, y] : origins) g.placement.push_back({x, y});
  g.validate();
  return g;
}

// (name, byte offset, numpy type string) of each field: the one description of the records the
// Python side views (Peak and TruePeak are plain structs of 4-byte fields).
using Field = std::tuple<std::string, std::size_t, std::string>;
std::vector<Field> peak_fields() {
  return {{"panel", offsetof(Peak, panel), "<i4"},
          {"x", offsetof(Peak, x), "<f4"},
          {"y", offsetof(Peak, y), "<f4"},
          {"intensity", offsetof(Peak, total_intensity), "<f4"},
          {"pixels", offsetof(Peak, n_pixels), "<i4"},
          {"max_value", offsetof(Peak, max_value), "<f4"},
          {"background", offsetof(Peak, background), "<f4"},
          {"background_sigma", offsetof(Peak, background_sigma), "<f4"},
          {"snr", offsetof(Peak, snr), "<f4"}};
}
std::vector<Field> true_peak_fields() {
  return {{"panel", offsetof(TruePeak, panel), "<i4"},
          {"x", offsetof(TruePeak, x), "<f4"},
          {"y", offsetof(TruePeak, y), "<f4"},
          {"intensity", offsetof(TruePeak, intensity_adu), "<f4"},
          {"sigma", offsetof(TruePeak, sigma), "<f4"},
          {"snr", offsetof(TruePeak, snr), "<f4"}};
}

}  // namespace

void bind_stream(nb::module_& m) {
  nb::class_<DetectorGeometry>(
      m, "DetectorGeometry",
      "Panels, their pixel shape and where each sits relative to the beam (stream/detector.h): "
      "panel p's pixel (col, row) is at origin[p] + (col, row) in the lab plane, beam at (0, 0).")
      .def(nb::new_(&make_geometry), nb::arg("panels"), nb::arg("rows"), nb::arg("cols"),
           nb::arg("origins"), nb::arg("name") = "custom",
           "origins: one (x, y) per panel, the lab position of its pixel (col 0, row 0).")
      .def_ro("name", &DetectorGeometry::name)
      .def_ro("panels", &DetectorGeometry::panels)
      .def_ro("rows", &DetectorGeometry::rows)
      .def_ro("cols", &DetectorGeometry::cols)
      .def_prop_ro("shape", [](const DetectorGeometry& g) { return std::vector<int64_t>{g.panels, g.rows, g.cols}; },
                   "(panels, rows, cols): a frame's shape.")
      .def_prop_ro("origins",
                   [](const DetectorGeometry& g) {
                     std::vector<std::pair<double, double>> o;
                     for (const auto& p : g.placement) o.emplace_back(p.origin_x, p.origin_y);
                     return o;
                   })
      .def("radius", &DetectorGeometry::radius, nb::arg("panel"), nb::arg("col"), nb::arg("row"),
           "Distance from the beam of a panel position, pixels.")
      .def("__repr__", [](const DetectorGeometry& g) {
        return "DetectorGeometry('" + g.name + "', panels=" + std::to_string(g.panels) +
               ", rows=" + std::to_string(g.rows) + ", cols=" + std::to_string(g.cols) + ")";
      });
  m.def(
      "detector_geometry", [](const std::string& name) { return stream::detector_geometry(name); },
      nb::arg("name"), "A known detector: 'single', 'quad', 'epix10k2m' or 'jungfrau4m'.");
  m.def("detector_names", [] {
    std::vector<std::string> names;
    for (std::string_view n : stream::detector_names()) names.emplace_back(n);
    return names;
  });
  m.def("panel_centred_geometry", &stream::panel_centred_geometry, nb::arg("panels"),
        nb::arg("rows"), nb::arg("cols"),
        "Every panel centred on the beam: what a frame file without a geometry means.");
  m.def("_peak_fields", &peak_fields);
  m.def("_true_peak_fields", &true_peak_fields);

  using CO = stream::ClassicFinderOptions;
  nb::class_<CO>(m, "ClassicFinderOptions", "The peakfinder8-style finder's settings (stream/classic_finder.h).")
      .def(nb::init<>())
      .def_rw("min_pixel_snr", &CO::min_pixel_snr)
      .def_rw("min_peak_snr", &CO::min_peak_snr)
      .def_rw("adc_threshold", &CO::adc_threshold)
      .def_rw("min_pixels", &CO::min_pixels)
      .def_rw("max_pixels", &CO::max_pixels)
      .def_rw("local_background_margin", &CO::local_background_margin)
      .def_rw("clipping_iterations", &CO::clipping_iterations)
      .def_rw("min_bin_pixels", &CO::min_bin_pixels);
  using MO = stream::MaskPeakOptions;
  nb::class_<MO>(m, "MaskPeakOptions", "How the network's mask becomes peaks (stream/peaks.h).")
      .def(nb::init<>())
      .def_rw("min_pixels", &MO::min_pixels)
      .def_rw("small_peak_snr", &MO::small_peak_snr)
      .def_rw("max_pixels", &MO::max_pixels)
      .def_rw("min_intensity", &MO::min_intensity)
      .def_rw("background_margin", &MO::background_margin);

  nb::class_<FrameFinder>(m, "_PeakFinder", "mixprec.stream.PeakFinder's engine.")
      .def(
          "__init__",
          [](FrameFinder* self, const DetectorGeometry& g, nb::handle bad, const CO& o) {
            std::vector<uint8_t> mask = mask_arg(bad, g);
            nb::gil_scoped_release release;
            new (self) FrameFinder(g, std::move(mask), o);
          },
          nb::arg("geometry"), nb::arg("bad_pixels").none(), nb::arg("options"))
      .def(
          "__init__",
          [](FrameFinder* self, const std::string& model, const std::string& precision,
             const DetectorGeometry& g, nb::handle bad, const MO& o) {
            const models::NetPrecision p = models::parse_net_precision(precision);
            std::vector<uint8_t> mask = mask_arg(bad, g);
            nb::gil_scoped_release release;
            new (self) FrameFinder(model, p, g, std::move(mask), o);
          },
          nb::arg("model"), nb::arg("precision"), nb::arg("geometry"), nb::arg("bad_pixels").none(),
          nb::arg("options"))
      .def(
          "find", [](FrameFinder& f, const InputArray& frame) { return find_frames(f, frame, false); },
          nb::arg("frame"))
      .def(
          "find_batch", [](FrameFinder& f, const InputArray& frames) { return find_frames(f, frames, true); },
          nb::arg("frames"))
      .def_prop_ro("geometry", &FrameFinder::geometry)
      .def_prop_ro("input_dtype", &FrameFinder::input_dtype)
      .def_prop_ro("precision", &FrameFinder::precision)
      .def_prop_ro("last_input", &FrameFinder::last_input);
  // The yardstick of the binding's overhead (bench/python_stream_finders.py): `reps` calls of
  // the same find on one frame from a C++ loop, seconds each.
  m.def(
      "_find_seconds_from_cpp",
      [](FrameFinder& finder, const InputArray& frame, int64_t reps) {
        const Frames f = frames_arg(frame, finder.geometry(), false);
        nb::gil_scoped_release release;
        std::vector<double> seconds;
        for (int64_t i = 0; i < reps; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          finder.find(f);
          seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return seconds;
      },
      nb::arg("finder"), nb::arg("frame"), nb::arg("reps"));

  nb::class_<FrameFile>(m, "_FrameFile")
      .def(nb::init<const std::string&>(), nb::arg("path"))
      .def("__len__", &FrameFile::frames)
      .def("read", &FrameFile::read, nb::arg("index"))
      .def_prop_ro("geometry", &FrameFile::geometry)
      .def_prop_ro("sample_type", &FrameFile::sample_type)
      .def_prop_ro("path", &FrameFile::path)
      .def_prop_ro("bad_pixels", &FrameFile::bad_pixels)
      .def_prop_ro("ground_truth", &FrameFile::ground_truth);

  nb::class_<Synthetic>(m, "_SyntheticDetector")
      .def(nb::init<DetectorGeometry, uint64_t>(), nb::arg("geometry"), nb::arg("seed"))
      .def_prop_ro("geometry", &Synthetic::geometry)
      .def_prop_ro("bad_pixels", &Synthetic::bad_pixels)
      .def("frame", &Synthetic::frame, nb::arg("index"));
}

}  // namespace mixprec::python
