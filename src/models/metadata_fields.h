#pragma once
// Integer and integer-list fields of a model file's safetensors metadata (a model's
// configuration), shared by the model files (video_model_file.cpp, peaknet.cpp). Errors name
// the file, the key and the text: "[<label>] <path>: metadata <key> = '<text>' is not an integer".
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::models::detail {

// metadata[key], or an Error: "[<label>] <path>: metadata has no '<key>' (not a file written by
// <writer>?)".
inline const std::string& required_field(std::string_view label, const std::string& path,
                                         const std::map<std::string, std::string>& metadata,
                                         const std::string& key, std::string_view writer) {
  const auto it = metadata.find(key);
  MIXPREC_CHECK(it != metadata.end(), "[", label, "] ", path, ": metadata has no '", key,
                "' (not a file written by ", writer, "?)");
  return it->second;
}

// The file's "format" must be `format`.
inline void check_format(std::string_view label, const std::string& path,
                         const std::map<std::string, std::string>& metadata,
                         std::string_view format, std::string_view writer) {
  const std::string& found = required_field(label, path, metadata, "format", writer);
  MIXPREC_CHECK(found == format, "[", label, "] ", path, ": format is '", found, "', expected '",
                format, "'");
}

inline std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

inline int64_t parse_int_field(std::string_view label, const std::string& path,
                               const std::string& key, std::string_view text) {
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MIXPREC_CHECK(ec == std::errc() && ptr == text.data() + text.size() && !text.empty(), "[", label,
                "] ", path, ": metadata ", key, " = '", text, "' is not an integer");
  return value;
}

inline std::vector<int64_t> parse_int_list_field(std::string_view label, const std::string& path,
                                                 const std::string& key, const std::string& text) {
  std::vector<int64_t> out;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(
        parse_int_field(label, path, key, std::string_view(text).substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

}  // namespace mixprec::models::detail
