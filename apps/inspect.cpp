// `mixprec inspect FILE`: what a safetensors file holds, for people and (--json) scripts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "commands.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::app {
namespace {

// Summary of one tensor's values. Floats go through f64 (exact for every float dtype);
// integers keep exact int64 extremes, which f64 would round past 2^53.
struct Stats {
  bool available = false;  // false for dtypes mixprec cannot read (I8, F8_E4M3, ...)
  bool integer = false;
  int64_t count = 0;  // elements that are not NaN
  int64_t nan = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  int64_t imin = std::numeric_limits<int64_t>::max();
  int64_t imax = std::numeric_limits<int64_t>::min();
  double sum = 0.0;
};

template <typename T>
void accumulate_integers(const std::byte* bytes, std::size_t n, Stats& s) {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));  // the mapping need not be aligned
    const auto x = static_cast<int64_t>(v);
    s.imin = std::min(s.imin, x);
    s.imax = std::max(s.imax, x);
    s.sum += static_cast<double>(x);
  }
  s.count += static_cast<int64_t>(n);
}

Stats compute_stats(const io::SafetensorsFile& file, const io::TensorInfo& info) {
  Stats s;
  if (!info.dtype) return s;
  s.available = true;
  const std::span<const std::byte> bytes = file.data(info);
  const DType dtype = *info.dtype;
  const auto n = static_cast<std::size_t>(info.numel);
  if (!is_floating(dtype)) {
    s.integer = true;
    switch (dtype) {
      case DType::I64:
        accumulate_integers<int64_t>(bytes.data(), n, s);
        break;
      case DType::I32:
        accumulate_integers<int32_t>(bytes.data(), n, s);
        break;
      // BOOL is read as bytes: a stray 2 in an untrusted file must not become a C++ bool.
      case DType::U8:
      case DType::Bool:
        accumulate_integers<uint8_t>(bytes.data(), n, s);
        break;
      default:
        MIXPREC_ASSERT(false && "unhandled integer dtype");
    }
    return s;
  }
  // Chunks bound the scratch memory; the aligned copy makes the typed reads legal.
  constexpr std::size_t kChunk = 1 << 16;
  std::vector<double> src(kChunk), values(kChunk);  // double storage: 8-byte aligned for all
  const std::size_t esize = info.element_size;
  for (std::size_t at = 0; at < n; at += kChunk) {
    const std::size_t m = std::min(kChunk, n - at);
    std::memcpy(src.data(), bytes.data() + at * esize, m * esize);
    kernels::convert(src.data(), dtype, values.data(), DType::F64, m);
    for (std::size_t i = 0; i < m; ++i) {
      const double v = values[i];
      if (std::isnan(v)) {
        ++s.nan;
        continue;
      }
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
      s.sum += v;
      ++s.count;
    }
  }
  return s;
}

// Enough digits to round-trip the dtype (17 for f64, 9 for the narrower floats).
std::string number(double v, bool f64) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[40];
  std::snprintf(buf, sizeof buf, f64 ? "%.17g" : "%.9g", v);
  return buf;
}

std::string short_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

struct Summary {
  std::string min, max, mean;  // JSON values or text cells
};

Summary summarize(const Stats& s, DType dtype, bool json) {
  const std::string none = json ? "null" : "-";
  if (!s.available || s.count == 0)
    return {none, none, s.nan > 0 ? (json ? "\"nan\"" : "nan") : none};
  const double mean = s.nan > 0 ? std::nan("") : s.sum / static_cast<double>(s.count);
  if (s.integer) {
    const std::string mean_text = json ? number(mean, true) : short_number(mean);
    return {std::to_string(s.imin), std::to_string(s.imax), mean_text};
  }
  if (json) {
    const bool f64 = dtype == DType::F64;
    return {number(s.min, f64), number(s.max, f64), number(mean, true)};
  }
  return {short_number(s.min), short_number(s.max), short_number(mean)};
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

void print_json(const io::SafetensorsFile& file) {
  const io::SafetensorsHeader& h = file.header();
  std::string out = "{\n";
  out += "  \"file\": " + io::json_quote(file.path()) + ",\n";
  out += "  \"header_bytes\": " + std::to_string(h.header_bytes) + ",\n";
  out += "  \"data_bytes\": " + std::to_string(h.data_bytes) + ",\n";
  out += "  \"metadata\": {";
  bool first = true;
  for (const auto& [key, value] : h.metadata) {
    out += std::string(first ? "" : ", ") + io::json_quote(key) + ": " + io::json_quote(value);
    first = false;
  }
  out += "},\n  \"tensors\": [";
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const io::TensorInfo& t = h.tensors[i];
    const Stats s = compute_stats(file, t);
    const Summary sum = summarize(s, t.dtype.value_or(DType::F32), true);
    out += i ? ",\n    {" : "\n    {";
    out += "\"name\": " + io::json_quote(t.name) + ", \"dtype\": " + io::json_quote(t.dtype_name) +
           ", \"shape\": [";
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      out += (d ? ", " : "") + std::to_string(t.shape[d]);
    out += "], \"data_offsets\": [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    out += ", \"min\": " + sum.min + ", \"max\": " + sum.max + ", \"mean\": " + sum.mean;
    out += ", \"nan\": " + (s.available ? std::to_string(s.nan) : std::string("null")) + "}";
  }
  out += h.tensors.empty() ? "]\n}\n" : "\n  ]\n}\n";
  std::fputs(out.c_str(), stdout);
}

void print_table(const io::SafetensorsFile& file) {
  const io::SafetensorsHeader& h = file.header();
  std::printf("%s: %zu tensors, %s of data, %llu-byte header\n", file.path().c_str(),
              h.tensors.size(), human_bytes(h.data_bytes).c_str(),
              static_cast<unsigned long long>(h.header_bytes));
  if (!h.metadata.empty()) {
    std::printf("metadata:\n");
    for (const auto& [key, value] : h.metadata)
      std::printf("  %s: %s\n", io::json_quote(key).c_str(), io::json_quote(value).c_str());
  }
  if (h.tensors.empty()) return;
  struct Row {
    std::string name, dtype, shape, min, max, mean, note;
  };
  std::vector<Row> rows;
  rows.push_back({"name", "dtype", "shape", "min", "max", "mean", ""});
  for (const io::TensorInfo& t : h.tensors) {
    const Stats s = compute_stats(file, t);
    const Summary sum = summarize(s, t.dtype.value_or(DType::F32), false);
    // Names are untrusted: quote only the ones that would break the table.
    const bool plain = std::all_of(t.name.begin(), t.name.end(), [](char c) {
      return static_cast<unsigned char>(c) > 0x20 && c != '"' && c != '\\';
    });
    rows.push_back({plain && !t.name.empty() ? t.name : io::json_quote(t.name),
                    std::string(t.dtype_name), shape_to_string(t.shape), sum.min, sum.max, sum.mean,
                    s.nan > 0 ? "(" + std::to_string(s.nan) + " NaN)" : ""});
  }
  std::size_t w[6] = {};
  for (const Row& r : rows) {
    const std::string* cells[6] = {&r.name, &r.dtype, &r.shape, &r.min, &r.max, &r.mean};
    for (int c = 0; c < 6; ++c) w[c] = std::max(w[c], cells[c]->size());
  }
  for (const Row& r : rows) {
    std::printf("%-*s  %-*s  %-*s  %*s  %*s  %*s%s%s\n", static_cast<int>(w[0]), r.name.c_str(),
                static_cast<int>(w[1]), r.dtype.c_str(), static_cast<int>(w[2]), r.shape.c_str(),
                static_cast<int>(w[3]), r.min.c_str(), static_cast<int>(w[4]), r.max.c_str(),
                static_cast<int>(w[5]), r.mean.c_str(), r.note.empty() ? "" : "  ", r.note.c_str());
  }
}

}  // namespace

int run_inspect(Args args) {
  bool json = false;
  std::string path;
  bool have_path = false;
  for (std::string_view a : args) {
    if (a == "--help" || a == "-h") {
      std::printf(
          "Usage: mixprec inspect FILE [--json]\n\n"
          "Validates a safetensors file and prints its metadata and, per tensor in header order,\n"
          "the name, dtype, shape, min, max and mean. NaNs are left out of min/max/mean and\n"
          "counted (a tensor with any NaN has mean nan); dtypes mixprec has no type for (I8,\n"
          "F8_E4M3, ...) are listed without statistics.\n\n"
          "  --json   one JSON object: file, header_bytes, data_bytes, metadata and tensors\n"
          "           [{name, dtype, shape, data_offsets, min, max, mean, nan}]; non-finite\n"
          "           values are the strings \"inf\", \"-inf\", \"nan\"; null when there is "
          "none\n\n"
          "Exit status: 0 ok, 1 unreadable or malformed file, 2 usage mistake.\n");
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError{"inspect: unknown option '" + std::string(a) +
                       "' (see 'mixprec inspect --help')"};
    } else if (have_path) {
      throw UsageError{"inspect: expected one FILE, got '" + path + "' and '" + std::string(a) +
                       "'"};
    } else {
      path = a;
      have_path = true;
    }
  }
  if (!have_path) throw UsageError{"inspect: missing FILE (see 'mixprec inspect --help')"};

  const io::SafetensorsFile file = io::SafetensorsFile::open(path);
  if (json) {
    print_json(file);
  } else {
    print_table(file);
  }
  return 0;
}

}  // namespace mixprec::app
