#include "cli_args.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "mixprec/core/error.h"

namespace mixprec::app {
namespace {

template <typename T>
T parse_number(std::string_view text, bool& ok) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  ok = ec == std::errc() && ptr == end && !text.empty();
  return value;
}

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// NaN is an option's "unset" (its help says what happens then): no default to print.
std::string format_default(double v) { return std::isnan(v) ? "" : format_number(v); }

// "in [1, 16]", ">= 0", "<= 1", or "" for no range.
std::string format_range(const Range& r) {
  const bool low = std::isfinite(r.min), high = std::isfinite(r.max);
  if (low && high) return "in [" + format_number(r.min) + ", " + format_number(r.max) + "]";
  if (low) return ">= " + format_number(r.min);
  if (high) return "<= " + format_number(r.max);
  return "";
}

// "(default 8, in [1, 16])": what --help says after an option's text.
std::string help_suffix(const std::string& default_value, const Range& range) {
  std::string parts = default_value.empty() ? "" : "default " + default_value;
  const std::string bounds = format_range(range);
  if (!bounds.empty()) parts += (parts.empty() ? "" : ", ") + bounds;
  return parts;
}

}  // namespace

#ifndef MIXPREC_SOURCE_DIR
#define MIXPREC_SOURCE_DIR "."
#endif

std::optional<int64_t> parse_integer(std::string_view text) {
  bool ok = false;
  const auto value = parse_number<int64_t>(text, ok);
  if (!ok) return std::nullopt;
  return value;
}

int64_t integer_option(std::string_view command, std::string_view option, std::string_view text) {
  const std::optional<int64_t> value = parse_integer(text);
  if (!value)
    throw UsageError{std::string(command) + ": " + std::string(option) +
                     " expects an integer, got '" + std::string(text) + "'"};
  return *value;
}

int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                         const std::string& file, int64_t min, std::optional<int64_t> fallback) {
  const std::string expected = "expected an integer >= " + std::to_string(min);
  const auto it = metadata.find(key);
  if (it == metadata.end()) {
    if (fallback) return *fallback;
    throw Error(file + ": metadata has no '" + key + "' (" + expected + ")");
  }
  const std::optional<int64_t> value = parse_integer(it->second);
  if (!value || *value < min)
    throw Error(file + ": metadata '" + key + "' is '" + it->second + "', " + expected);
  return *value;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string source_path(const std::string& relative) {
  return std::string(MIXPREC_SOURCE_DIR) + "/" + relative;
}

void ArgParser::fail(const std::string& message) const {
  throw UsageError{command_ + ": " + message + " (see 'mixprec " + command_ + " --help')"};
}

void ArgParser::option(std::string name, std::string* value, std::string help) {
  options_.push_back({name, std::move(help), help_suffix(*value, {}), true,
                      [value](std::string_view v) { *value = std::string(v); }});
}

void ArgParser::check_range(const std::string& name, double value, const Range& range) const {
  const bool declared = std::isfinite(range.min) || std::isfinite(range.max);
  // Within a declared range a value is finite: NaN and infinity fail too.
  if (declared && !(std::isfinite(value) && value >= range.min && value <= range.max))
    fail(name + " must be " + format_range(range) + ", got " + format_number(value));
}

void ArgParser::option(std::string name, int64_t* value, std::string help, Range range) {
  options_.push_back({name, std::move(help), help_suffix(std::to_string(*value), range), true,
                      [this, value, name, range](std::string_view v) {
                        const std::optional<int64_t> parsed = parse_integer(v);
                        if (!parsed)
                          fail(name + " expects an integer, got '" + std::string(v) + "'");
                        check_range(name, static_cast<double>(*parsed), range);
                        *value = *parsed;
                      }});
}

void ArgParser::option(std::string name, double* value, std::string help, Range range) {
  options_.push_back({name, std::move(help), help_suffix(format_default(*value), range), true,
                      [this, value, name, range](std::string_view v) {
                        bool ok = false;
                        *value = parse_number<double>(v, ok);
                        if (!ok) fail(name + " expects a number, got '" + std::string(v) + "'");
                        check_range(name, *value, range);
                      }});
}

void ArgParser::flag(std::string name, bool* value, std::string help) {
  options_.push_back(
      {name, std::move(help), "", false, [value](std::string_view) { *value = true; }});
}

void ArgParser::positional(std::string metavar, std::vector<std::string>* values,
                           std::string help) {
  positional_metavar_ = std::move(metavar);
  positional_help_ = std::move(help);
  positional_ = values;
}

bool ArgParser::parse(Args args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      print_help();
      return false;
    }
    if (a.substr(0, 2) != "--") {
      if (positional_ == nullptr) fail("unexpected argument '" + std::string(a) + "'");
      positional_->emplace_back(a);
      continue;
    }
    const std::size_t eq = a.find('=');
    const std::string_view name = a.substr(0, eq);
    const Option* match = nullptr;
    for (const Option& o : options_)
      if (o.name == name) match = &o;
    if (match == nullptr) fail("unknown option '" + std::string(name) + "'");
    if (!match->takes_value) {
      if (eq != std::string_view::npos) fail(std::string(name) + " takes no value");
      match->set({});
    } else if (eq != std::string_view::npos) {
      match->set(a.substr(eq + 1));
    } else {
      if (i + 1 >= args.size()) fail(std::string(name) + " needs a value");
      match->set(args[++i]);
    }
  }
  return true;
}

void ArgParser::print_help() const {
  std::printf("Usage: mixprec %s [options]%s%s\n\n%s\n\nOptions:\n", command_.c_str(),
              positional_ != nullptr ? " " : "", positional_metavar_.c_str(), summary_.c_str());
  if (positional_ != nullptr)
    std::printf("  %-22s %s\n", positional_metavar_.c_str(), positional_help_.c_str());
  for (const Option& o : options_) {
    const std::string left = o.takes_value ? o.name + " V" : o.name;
    std::printf("  %-22s %s", left.c_str(), o.help.c_str());
    if (o.takes_value && !o.note.empty()) std::printf(" (%s)", o.note.c_str());
    std::printf("\n");
  }
  std::printf("  %-22s %s\n", "--help", "this text");
  if (!epilog_.empty()) std::printf("\n%s\n", epilog_.c_str());
}

}  // namespace mixprec::app
