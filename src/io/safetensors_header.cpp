// The safetensors header parser: everything about a file that can be checked from its first
// 8 + N bytes and its size. Kept free of Tensor and mmap so the fuzz target links only this,
// json.cpp, shape.cpp and error.cpp.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "mixprec/core/error.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian port must byte-swap elements");

const SafetensorsDType* find_safetensors_dtype(std::string_view name) {
  for (const SafetensorsDType& row : kSafetensorsDTypes)
    if (row.name == name) return &row;
  return nullptr;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const SafetensorsDType& row : kSafetensorsDTypes)
    if (row.has_dtype && row.dtype == dtype) return row.name;
  MIXPREC_ASSERT(false && "DType without a safetensors name");  // ruled out by a static_assert
  __builtin_unreachable();
}

namespace {

// Each value in a header costs ~100 bytes once parsed (json.h). Real headers hold ~10 values
// per tensor, so this admits a million tensors while capping a hostile header at ~1.6 GB of
// parse tree instead of the ~5 GB a 100 MB "[0,0,0,..." would take.
constexpr std::size_t kMaxHeaderValues = 16u << 20;

// A tensor name or key for a message: quoted (so control characters cannot break the line)
// and shortened so a hostile megabyte-long name cannot flood it.
std::string quoted(std::string_view s) { return json_quote_short(s, 120); }

class HeaderParser {
 public:
  HeaderParser(std::span<const std::byte> file, std::string_view label)
      : file_(file), prefix_(detail::concat("[safetensors] ", label, ": ")) {}

  SafetensorsHeader parse() {
    read_lengths();
    const std::string_view text(reinterpret_cast<const char*>(file_.data()) + 8,
                                static_cast<std::size_t>(out_.header_bytes));
    // The reference reader insists on '{' first; padding may only follow the JSON.
    if (text.front() != '{') fail("header does not start with '{' (not a safetensors file?)");
    const std::string context = prefix_ + "header is not valid JSON";
    JsonParseOptions options;
    options.context = context;
    options.max_depth = 8;                // the format nests 3 deep; anything deeper is garbage
    options.allow_duplicate_keys = true;  // reported below as duplicate tensor names
    options.max_values = kMaxHeaderValues;
    const JsonValue root = parse_json(text, options);
    if (!root.is_object()) fail("header is not a JSON object");

    std::set<std::string_view> seen;
    for (const JsonMember& member : root.members()) {
      if (!seen.insert(member.key).second) {
        fail(member.key == "__metadata__" ? std::string("duplicate \"__metadata__\"")
                                          : "duplicate tensor name " + quoted(member.key));
      }
      if (member.key == "__metadata__") {
        read_metadata(member.value);
      } else {
        out_.tensors.push_back(read_tensor(member.key, member.value));
      }
    }
    check_tiling();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(prefix_ + what); }

  void read_lengths() {
    const uint64_t size = file_.size();
    if (size < 8)
      fail(detail::concat("file is ", size,
                          " bytes, too short for the 8-byte header length (truncated?)"));
    uint64_t n = 0;
    std::memcpy(&n, file_.data(), 8);  // little-endian, as checked by the static_assert
    if (n > kSafetensorsMaxHeaderBytes)
      fail(detail::concat("header length ", n, " is over the ", kSafetensorsMaxHeaderBytes,
                          "-byte limit (not a safetensors file?)"));
    if (n > size - 8)
      fail(detail::concat("header length ", n, " runs past the end of the file (", size,
                          " bytes; truncated?)"));
    if (n < 2) fail(detail::concat("header length ", n, " is too short for a JSON object"));
    out_.header_bytes = n;
    out_.data_offset = 8 + n;
    out_.data_bytes = size - out_.data_offset;
  }

  void read_metadata(const JsonValue& value) {
    if (!value.is_object())
      fail(detail::concat("\"__metadata__\" must be an object of strings, got a ",
                          JsonValue::kind_name(value.kind())));
    for (const JsonMember& m : value.members()) {
      if (!m.value.is_string())
        fail(detail::concat("\"__metadata__\" value of ", quoted(m.key),
                            " must be a string, got a ", JsonValue::kind_name(m.value.kind())));
      if (!out_.metadata.emplace(m.key, m.value.as_string()).second)
        fail("duplicate \"__metadata__\" key " + quoted(m.key));
    }
  }

  TensorInfo read_tensor(const std::string& name, const JsonValue& value) {
    const std::string where = "tensor " + quoted(name);
    if (!value.is_object())
      fail(detail::concat(where, ": expected an object with dtype, shape and data_offsets, got a ",
                          JsonValue::kind_name(value.kind())));
    const JsonValue* dtype = nullptr;
    const JsonValue* shape = nullptr;
    const JsonValue* offsets = nullptr;
    for (const JsonMember& m : value.members()) {
      const JsonValue** slot = m.key == "dtype"          ? &dtype
                               : m.key == "shape"        ? &shape
                               : m.key == "data_offsets" ? &offsets
                                                         : nullptr;
      if (slot == nullptr) fail(where + ": unknown field " + quoted(m.key));
      if (*slot != nullptr) fail(where + ": duplicate field " + quoted(m.key));
      *slot = &m.value;
    }
    for (const auto& [field, name_of] :
         {std::pair{dtype, "dtype"}, std::pair{shape, "shape"}, std::pair{offsets, "data_offsets"}})
      if (field == nullptr) fail(where + ": missing field \"" + name_of + "\"");

    TensorInfo info;
    info.name = name;
    if (!dtype->is_string())
      fail(detail::concat(where, ": dtype must be a string, got a ",
                          JsonValue::kind_name(dtype->kind())));
    const SafetensorsDType* type = find_safetensors_dtype(dtype->as_string());
    if (type == nullptr) fail(where + ": unknown dtype " + quoted(dtype->as_string()));
    info.dtype_name = type->name;
    if (type->has_dtype) info.dtype = type->dtype;
    info.element_size = type->size;

    if (!shape->is_array())
      fail(detail::concat(where, ": shape must be an array, got a ",
                          JsonValue::kind_name(shape->kind())));
    const std::vector<JsonValue>& dims = shape->items();
    int64_t numel = 1;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      const std::optional<int64_t> dim = dims[i].is_number() ? dims[i].as_int64() : std::nullopt;
      if (!dim || *dim < 0)
        fail(detail::concat(where, ": shape entry ", i, " is ", describe(dims[i]),
                            "; expected a non-negative integer"));
      info.shape.push_back(*dim);
      if (__builtin_mul_overflow(numel, *dim, &numel))
        fail(detail::concat(where, ": shape ", shape_to_string(info.shape),
                            "... has more elements than int64 can count"));
    }
    info.numel = numel;
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), uint64_t{type->size}, &nbytes))
      fail(detail::concat(where, ": ", type->name, " ", shape_to_string(info.shape),
                          " is more bytes than 64 bits can count"));

    if (!offsets->is_array() || offsets->items().size() != 2)
      fail(where + ": data_offsets must be an array [begin, end]");
    for (std::size_t i = 0; i < 2; ++i) {
      const JsonValue& v = offsets->items()[i];
      const std::optional<uint64_t> off = v.is_number() ? v.as_uint64() : std::nullopt;
      if (!off)
        fail(detail::concat(where, ": data_offsets ", i == 0 ? "begin" : "end", " is ", describe(v),
                            "; expected a non-negative integer"));
      (i == 0 ? info.begin : info.end) = *off;
    }
    const std::string range = detail::concat("data_offsets [", info.begin, ", ", info.end, "]");
    if (info.end < info.begin) fail(where + ": " + range + " end before they begin");
    if (info.end > out_.data_bytes)
      fail(detail::concat(where, ": ", range, " run past the end of the data (", out_.data_bytes,
                          " bytes after the header; truncated?)"));
    if (info.end - info.begin != nbytes)
      fail(detail::concat(where, ": ", range, " hold ", info.end - info.begin, " bytes but ",
                          type->name, " ", shape_to_string(info.shape), " needs ", nbytes));
    return info;
  }

  // The tensors must cover the data section exactly once: sorted by offset, each begins where
  // the previous one ends, and the last ends at the end of the file. (Header order is free.)
  void check_tiling() const {
    std::vector<const TensorInfo*> order;
    order.reserve(out_.tensors.size());
    for (const TensorInfo& t : out_.tensors) order.push_back(&t);
    // Empty tensors share an offset with their neighbour; ties keep header order (stable).
    std::stable_sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t expected = 0;
    const TensorInfo* previous = nullptr;
    for (const TensorInfo* t : order) {
      if (t->begin < expected)
        fail(detail::concat("tensor ", quoted(t->name), " (data_offsets [", t->begin, ", ", t->end,
                            "]) overlaps tensor ", quoted(previous->name), " (data_offsets [",
                            previous->begin, ", ", previous->end, "])"));
      if (t->begin > expected)
        fail(detail::concat("gap of ", t->begin - expected, " bytes in the data before tensor ",
                            quoted(t->name), " (data_offsets [", t->begin, ", ", t->end,
                            "]); tensors must be packed"));
      expected = t->end;
      previous = t;
    }
    if (expected != out_.data_bytes)
      fail(detail::concat(out_.data_bytes - expected,
                          " bytes after the last tensor (the data "
                          "section is ",
                          out_.data_bytes, " bytes, the tensors cover ", expected, ")"));
  }

  // A JSON value for an error message, shortened so a hostile value cannot flood it.
  static std::string describe(const JsonValue& v) {
    if (v.is_number()) {
      const std::string_view text = v.number_text();
      return text.size() <= 32 ? std::string(text) : std::string(text.substr(0, 32)) + "...";
    }
    return detail::concat("a ", JsonValue::kind_name(v.kind()));
  }

  std::span<const std::byte> file_;
  std::string prefix_;
  SafetensorsHeader out_;
};

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file,
                                           std::string_view label) {
  return HeaderParser(file, label).parse();
}

}  // namespace mixprec::io
