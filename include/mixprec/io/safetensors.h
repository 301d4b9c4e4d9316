#pragma once
// safetensors: the Hugging Face weight format, read through a read-only memory map and
// written atomically. docs/FORMATS.md describes the format and every rule checked here.
//
//   file   = u64 header_len (little-endian) | header (header_len bytes of UTF-8 JSON) | data
//   header = {"__metadata__": {str: str},                       (optional)
//             "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   data   = the tensors' row-major little-endian bytes; [begin, end) counts from the start
//            of data, and the tensors tile it exactly (no gap, no overlap, nothing after).
//
// Files are untrusted input (DESIGN.md section 6): opening one validates the whole header
// against the file size before any tensor byte is touched, and every violation throws
// mixprec::Error("[safetensors] <path>: <what is wrong>"), never reads out of bounds.
//
//   io::SafetensorsFile f = io::SafetensorsFile::open("model.safetensors");
//   for (const io::TensorInfo& t : f.tensors()) ... t.name, t.dtype_name, t.shape ...
//   Tensor w = f.tensor("encoder.weight");               // a copy, contiguous
//   io::save_safetensors("out.safetensors", {{"w", w}}, {{"format", "pt"}});
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixprec/core/dtype.h"
#include "mixprec/core/shape.h"
#include "mixprec/core/tensor.h"
#include "mixprec/io/atomic_file.h"

namespace mixprec::io {

// The reference implementation's bound on the header: a larger length field is taken as a
// corrupt or hostile file rather than an allocation to attempt.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// ---- dtypes: one table (DESIGN.md section 8) ----

// A dtype as the format names it. The format has more element types than mixprec; those open,
// show up in tensors() and copy byte for byte (data()), but tensor() refuses them.
struct SafetensorsDType {
  std::string_view name;  // "F32", "BF16", ... exactly as in the header
  std::size_t size;       // bytes per element
  bool has_dtype;         // whether mixprec has this element type...
  DType dtype;            // ...and which (meaningless when has_dtype is false)
};

inline constexpr SafetensorsDType kSafetensorsDTypes[] = {
    {"F64", 8, true, DType::F64},     {"F32", 4, true, DType::F32},
    {"F16", 2, true, DType::F16},     {"BF16", 2, true, DType::BF16},
    {"I64", 8, true, DType::I64},     {"I32", 4, true, DType::I32},
    {"U8", 1, true, DType::U8},       {"BOOL", 1, true, DType::Bool},
    {"U64", 8, false, DType::U8},     {"U32", 4, false, DType::U8},
    {"I16", 2, false, DType::U8},     {"U16", 2, false, DType::U8},
    {"I8", 1, false, DType::U8},      {"F8_E4M3", 1, false, DType::U8},
    {"F8_E5M2", 1, false, DType::U8},
};
static_assert(
    [] {
      // Every mixprec dtype has exactly one row, so DType -> name is a total function.
      for (std::size_t d = 0; d < kNumDTypes; ++d) {
        int rows = 0;
        for (const SafetensorsDType& row : kSafetensorsDTypes)
          rows += row.has_dtype && static_cast<std::size_t>(row.dtype) == d;
        if (rows != 1) return false;
      }
      return true;
    }(),
    "each DType needs exactly one row in kSafetensorsDTypes");

// The row named `name` ("F32"), or nullptr when the format has no such dtype.
const SafetensorsDType* find_safetensors_dtype(std::string_view name);
// The format's name for a mixprec dtype: DType::BF16 -> "BF16".
std::string_view safetensors_dtype_name(DType dtype);

// ---- reading ----

// One tensor's header entry, validated against the file.
struct TensorInfo {
  std::string name;
  std::string_view dtype_name;  // "F32", ...; points into kSafetensorsDTypes
  std::optional<DType> dtype;   // nullopt for a format dtype mixprec lacks (I8, F8_E4M3, ...)
  std::size_t element_size = 0;
  Shape shape;
  int64_t numel = 0;
  uint64_t begin = 0;  // byte range [begin, end) relative to the start of the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

// Everything the header says, after validation.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;              // in header order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t header_bytes = 0;                    // the header length field
  uint64_t data_offset = 0;                     // 8 + header_bytes: where the data starts
  uint64_t data_bytes = 0;                      // the data section's size
};

// Validates a whole file image (length field, JSON, every entry, the tiling of the data) and
// returns its header; `label` names the file in error messages. Reads nothing outside `file`.
// This is the parser the fuzz targets drive.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, std::string_view label);

// An open, validated safetensors file. Move-only; the mapping lives as long as the object.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates it. Throws "[safetensors] <path>: ...".
  // The file must not be truncated by someone else while it is open (the mapping would fault
  // on the missing pages, as it does for every mmap reader).
  static SafetensorsFile open(const std::string& path);
  // Validates an image already in memory, which must outlive the object (tests, fuzzers).
  static SafetensorsFile from_bytes(std::span<const std::byte> image,
                                    std::string label = "<memory>");

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return label_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }  // header order
  std::vector<std::string> names() const;                                     // header order
  std::size_t size() const { return header_.tensors.size(); }
  bool contains(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // Throws naming the file and the missing tensor.
  const TensorInfo& info(std::string_view name) const;
  // The tensor's raw little-endian bytes inside the mapping (no copy; valid while *this is).
  // Not necessarily aligned to the element size: copy before reading typed values.
  std::span<const std::byte> data(std::string_view name) const;
  std::span<const std::byte> data(const TensorInfo& info) const;
  // A contiguous copy in mixprec's dtype. Throws for a dtype mixprec lacks and for a BOOL
  // byte other than 0 or 1 (which a C++ bool cannot hold).
  Tensor tensor(std::string_view name) const;
  Tensor tensor(const TensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  void index_names();
  void unmap() noexcept;

  std::string label_;
  void* map_ = nullptr;  // the mmap'ed file, or nullptr for from_bytes()
  std::size_t map_size_ = 0;
  std::span<const std::byte> image_;  // the whole file
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors()
};

// An ordered state dict: names with tensors, in the order they were given or read.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

// Every tensor of a file, copied, in header order.
NamedTensors load_safetensors(const std::string& path);

// ---- writing ----

// Writes `tensors` atomically (io/atomic_file.h): on any error nothing is left at `path` or
// beside it and an existing file there is untouched. The header keeps the given order; the
// data section is laid out largest element first (stable), which with the 8-byte padded
// header aligns every tensor to its element size, as the reference writer does.
// Non-contiguous tensors are written in row-major order. Names must be unique, valid UTF-8
// and not "__metadata__"; metadata must be valid UTF-8. (From a std::map<std::string, Tensor>
// m: save_safetensors(path, NamedTensors(m.begin(), m.end())), in name order.)
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

// The streaming writer underneath, for tools that produce tensors one at a time (convert):
// declare every tensor first, then write_bytes(i, out) is called once per tensor, in data
// order, and must append exactly that tensor's byte count to `out`.
struct TensorRecord {
  std::string name;
  std::string_view dtype_name;  // a kSafetensorsDTypes name: "BF16", "I8", ...
  Shape shape;
};
using TensorBytesWriter = std::function<void(std::size_t index, AtomicFile& out)>;
void write_safetensors(const std::string& path, std::span<const TensorRecord> records,
                       const SafetensorsMetadata& metadata, const TensorBytesWriter& write_bytes);

}  // namespace mixprec::io
