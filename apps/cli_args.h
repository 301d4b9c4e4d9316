#pragma once
// A small declarative option parser for the subcommands: each option binds to a variable that
// holds its default, and --help is generated from the declarations (defaults included).
//   ArgParser p("video generate", "Generate a video stream frame by frame.");
//   p.option("--frames", &frames, "frames to generate", {.min = 1, .max = 10000});
//   if (!p.parse(args)) return 0;  // --help was printed
// Values are "--name value" or "--name=value"; a bad or unknown option is a UsageError, and so
// is a number outside its option's range ("video generate: --frames must be in [1, 10000]").
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"

namespace mixprec::app {

// Every number the commands read from text (an option, a list item, a file's metadata) goes
// through parse_integer, so a bad one is reported with what it is and what was expected, never
// as a bare "stoll".
// The whole of `text` as a base-10 integer, or nothing.
std::optional<int64_t> parse_integer(std::string_view text);
// An integer the user typed, e.g. an item of --steps 1,4: a UsageError (exit 2) otherwise,
// "<command>: <option> expects an integer, got 'abc'".
int64_t integer_option(std::string_view command, std::string_view option, std::string_view text);
// An integer field of a file's metadata, at least `min`: an Error (exit 1) otherwise,
// "<file>: metadata '<key>' is 'abc', expected an integer >= 0". A missing field gives
// `fallback`, or without one the same kind of message.
int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                         const std::string& file, int64_t min,
                         std::optional<int64_t> fallback = std::nullopt);

// Runs a parse of a user's value (a --precision or --preset name) and reports its failure as a
// usage mistake: "<command>: <the parser's message>", exit 2.
template <typename Parse>
auto parse_usage(std::string_view command, Parse&& parse) {
  try {
    return parse();
  } catch (const std::runtime_error& e) {
    throw UsageError{std::string(command) + ": " + e.what()};
  }
}

// "a,b,,c" -> {"a", "b", "c"}: the comma-separated lists options take.
std::vector<std::string> split_list(const std::string& text);

// A file of the source tree (the shipped corpus, models and peer scripts), by its path there.
std::string source_path(const std::string& relative);

// The values a numeric option accepts, both ends included; an end left out is open. A declared
// range (at least one end) is checked as the value is read, rejects NaN and infinity, and is
// shown in --help.
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary)
      : command_(std::move(command)), summary_(std::move(summary)) {}

  void option(std::string name, std::string* value, std::string help);
  void option(std::string name, int64_t* value, std::string help, Range range = {});
  void option(std::string name, double* value, std::string help, Range range = {});
  void flag(std::string name, bool* value, std::string help);  // no value: sets true
  // Bare words (not starting with "--"), in order; without this they are an error.
  void positional(std::string metavar, std::vector<std::string>* values, std::string help);
  void epilog(std::string text) { epilog_ = std::move(text); }

  // Returns false after printing --help (the caller exits 0).
  bool parse(Args args);
  void print_help() const;

 private:
  struct Option {
    std::string name, help;
    std::string note;  // "default 8, in [1, 16]": shown after the help text
    bool takes_value;
    std::function<void(std::string_view)> set;
  };
  [[noreturn]] void fail(const std::string& message) const;
  void check_range(const std::string& name, double value, const Range& range) const;
  std::string command_, summary_, epilog_;
  std::vector<Option> options_;
  std::string positional_metavar_, positional_help_;
  std::vector<std::string>* positional_ = nullptr;
};

}  // namespace mixprec::app
