// The safetensors writer: plans the header and the data layout, then streams the tensors'
// bytes through an AtomicFile.
#include <algorithm>
#include <cstring>
#include <set>

#include "mixprec/core/error.h"
#include "mixprec/io/atomic_file.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"

namespace mixprec::io {
namespace {

struct Plan {
  std::string header;              // padded JSON
  std::vector<std::size_t> order;  // record indices in data order
  std::vector<uint64_t> nbytes;    // per record
};

std::string prefix(const std::string& path) { return "[safetensors] " + path + ": "; }

Plan plan_file(const std::string& path, std::span<const TensorRecord> records,
               const SafetensorsMetadata& metadata) {
  const std::string pre = prefix(path);
  Plan plan;
  std::vector<std::size_t> element_size(records.size());
  plan.nbytes.resize(records.size());
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const TensorRecord& r = records[i];
    // JSON text must be UTF-8 (json_quote copies bytes through), and the reader rejects both
    // of these, so writing them would make a file nobody can open.
    if (!is_valid_utf8(r.name))
      throw Error(pre + "tensor name " + json_quote_short(r.name) + " is not valid UTF-8");
    if (r.name == "__metadata__")
      throw Error(pre + "tensor name \"__metadata__\" is reserved for the metadata");
    if (!names.insert(r.name).second)
      throw Error(pre + "duplicate tensor name " + json_quote_short(r.name));
    const SafetensorsDType* type = find_safetensors_dtype(r.dtype_name);
    if (type == nullptr)
      throw Error(pre + "tensor " + json_quote_short(r.name) + ": unknown dtype " +
                  json_quote_short(r.dtype_name));
    const int64_t numel = shape_numel(r.shape, "safetensors");
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), uint64_t{type->size}, &plan.nbytes[i]))
      throw Error(pre + "tensor " + json_quote_short(r.name) +
                  " is more bytes than 64 bits can count");
    element_size[i] = type->size;
  }
  for (const auto& [key, value] : metadata)
    if (!is_valid_utf8(key) || !is_valid_utf8(value))
      throw Error(pre + "metadata entry " + json_quote_short(key) + " is not valid UTF-8");

  // Largest elements first keeps every tensor aligned to its element size without padding
  // between tensors (the format allows none); stable, so equal sizes keep the caller's order.
  plan.order.resize(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) plan.order[i] = i;
  std::stable_sort(plan.order.begin(), plan.order.end(),
                   [&](std::size_t a, std::size_t b) { return element_size[a] > element_size[b]; });
  std::vector<uint64_t> begin(records.size());
  uint64_t offset = 0;
  for (const std::size_t i : plan.order) {
    begin[i] = offset;
    if (__builtin_add_overflow(offset, plan.nbytes[i], &offset))
      throw Error(pre + "the tensors add up to more bytes than 64 bits can count");
  }

  // Compact JSON like the reference writer, "__metadata__" first, tensors in caller order.
  std::string& h = plan.header;
  h += '{';
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) h += ',';
      first = false;
      h += json_quote(key) + ':' + json_quote(value);
    }
    h += '}';
  }
  for (std::size_t i = 0; i < records.size(); ++i) {
    const TensorRecord& r = records[i];
    if (h.size() > 1) h += ',';
    h += json_quote(r.name) + ":{\"dtype\":\"" + std::string(r.dtype_name) + "\",\"shape\":[";
    for (std::size_t d = 0; d < r.shape.size(); ++d)
      h += (d ? "," : "") + std::to_string(r.shape[d]);
    h += "],\"data_offsets\":[" + std::to_string(begin[i]) + ',' +
         std::to_string(begin[i] + plan.nbytes[i]) + "]}";
  }
  h += '}';
  // Pad with spaces so the data starts 8-byte aligned (the length field is 8 bytes).
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > kSafetensorsMaxHeaderBytes)
    throw Error(detail::concat(pre, "header of ", h.size(), " bytes is over the ",
                               kSafetensorsMaxHeaderBytes, "-byte limit readers accept"));
  return plan;
}

}  // namespace

void write_safetensors(const std::string& path, std::span<const TensorRecord> records,
                       const SafetensorsMetadata& metadata, const TensorBytesWriter& write_bytes) {
  const Plan plan = plan_file(path, records, metadata);  // every check before the file exists
  AtomicFile out(path, "safetensors");
  const uint64_t header_len = plan.header.size();
  out.write(&header_len, sizeof header_len);  // little-endian host (static_assert in the parser)
  out.write(plan.header.data(), plan.header.size());
  for (const std::size_t i : plan.order) {
    const uint64_t before = out.bytes_written();
    write_bytes(i, out);
    const uint64_t wrote = out.bytes_written() - before;
    if (wrote != plan.nbytes[i])
      throw Error(detail::concat(prefix(path), "tensor ", json_quote_short(records[i].name),
                                 ": wrote ", wrote, " bytes, expected ", plan.nbytes[i]));
  }
  out.commit();
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata) {
  std::vector<TensorRecord> records;
  records.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined())
      throw Error(prefix(path) + "tensor " + json_quote_short(name) + " is undefined");
    records.push_back({name, safetensors_dtype_name(t.dtype()), t.shape()});
  }
  write_safetensors(path, records, metadata, [&](std::size_t i, AtomicFile& out) {
    const Tensor& t = tensors[i].second;
    // Row-major bytes: a strided view is gathered first (one copy of that tensor only).
    const Tensor c = t.is_contiguous() ? t : t.contiguous();
    if (c.nbytes() > 0) out.write(c.data_ptr(), c.nbytes());
  });
}

}  // namespace mixprec::io
