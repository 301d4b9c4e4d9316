#pragma once
// What every benchmark program shares: options (--quick, --json, --help), robust timing
// (warm-up, then median and spread of repetitions) and result rows printed as a table and as
// one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/io/json.h"

namespace mixprec::bench {

struct Options {
  bool quick = false;
  bool json = false;  // JSON only (the table goes to stderr)
  int threads = 0;    // --threads N (0: the benchmark's default); not every benchmark reads it
};

// Parses the common flags; prints `usage` and exits 0 on --help, exits 2 on anything unknown.
inline Options parse_options(int argc, char** argv, const char* usage) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick")
      o.quick = true;
    else if (a == "--json")
      o.json = true;
    else if (a == "--threads" && i + 1 < argc)
      o.threads = std::atoi(argv[++i]);
    else if (a == "--help" || a == "-h") {
      std::printf(
          "%s\n  --quick   a short run (under a minute)\n  --json    print only the JSON results\n",
          usage);
      std::exit(0);
    } else {
      std::fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], argv[i]);
      std::exit(2);
    }
  }
  return o;
}

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0;
};

// Runs fn `warmup` times, then until `reps` runs and at least `min_seconds` have passed.
template <typename Fn>
Timing time_it(const Fn& fn, int warmup, int reps, double min_seconds) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  double total = 0;
  while (static_cast<int>(samples.size()) < reps || total < min_seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    samples.push_back(dt);
    total += dt;
    if (samples.size() > 1000) break;
  }
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front(), samples.back(),
          static_cast<int>(samples.size())};
}

// Benchmarks that interleave mixprec with oneDNN in one process run oneDNN's OpenMP threads
// passive (sleeping when idle) unless OMP_WAIT_POLICY is set: by default they spin for some
// milliseconds after each oneDNN call, on the very cores mixprec's next call runs on, and that
// measures the spinning, not mixprec (on a 2-core Zen 5, mixprec's convolutions read 41-44% of
// the peak interleaved with actively waiting oneDNN, 68-87% with passive; its GEMMs 35-53% and
// 60-87%). Passive, oneDNN pays a wake-up per call, as mixprec's pool does after its 100 us of
// spinning. libgomp reads the policy when it loads, so the program runs itself again with it set.
inline void run_openmp_passive(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "note: could not re-run with OMP_WAIT_POLICY=passive; oneDNN's idle "
                       "threads spin beside mixprec's\n");
}

// Times several implementations of the same work in interleaved rounds (each round runs every
// fn once, starting from a different one each time) so that bursts of load from other jobs on
// a shared machine hit all of them alike; then as time_it per fn. Warm-up: `warmup` rounds.
template <typename Fn>
std::vector<Timing> time_interleaved(const std::vector<Fn>& fns, int warmup, int rounds,
                                     double min_seconds) {
  const std::size_t count = fns.size();
  for (int i = 0; i < warmup; ++i)
    for (const Fn& fn : fns) fn();
  std::vector<std::vector<double>> samples(count);
  double total = 0;
  for (int r = 0; r < rounds || total < min_seconds; ++r) {
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t f = (j + static_cast<std::size_t>(r)) % count;
      const auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      samples[f].push_back(dt);
      total += dt;
    }
    if (r > 1000) break;
  }
  std::vector<Timing> out;
  for (std::vector<double>& s : samples) {
    std::sort(s.begin(), s.end());
    out.push_back({s[s.size() / 2], s.front(), s.back(), static_cast<int>(s.size())});
  }
  return out;
}

// One result: named fields in order, printed as a table row and as a JSON object.
struct Row {
  std::vector<std::pair<std::string, std::string>> fields;  // value already JSON-encoded
  Row& text(const std::string& key, const std::string& v) {
    fields.emplace_back(key, io::json_quote(v));
    return *this;
  }
  Row& num(const std::string& key, double v, int decimals = 2) {
    char buf[64];
    if (v != v)
      std::snprintf(buf, sizeof buf, "null");
    else
      std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    fields.emplace_back(key, buf);
    return *this;
  }
};

inline std::string unquote(const std::string& v) {
  return v.size() >= 2 && v.front() == '"' ? v.substr(1, v.size() - 2) : v;
}

// Prints rows as an aligned table (to stdout, or stderr in --json mode).
inline void print_table(const std::vector<Row>& rows, const Options& o) {
  if (rows.empty()) return;
  FILE* out = o.json ? stderr : stdout;
  std::vector<std::size_t> width;
  for (const auto& [k, v] : rows[0].fields) width.push_back(k.size());
  for (const Row& r : rows)
    for (std::size_t i = 0; i < r.fields.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], unquote(r.fields[i].second).size());
  for (std::size_t i = 0; i < width.size(); ++i)
    std::fprintf(out, "%-*s  ", static_cast<int>(width[i]), rows[0].fields[i].first.c_str());
  std::fprintf(out, "\n");
  for (const Row& r : rows) {
    for (std::size_t i = 0; i < r.fields.size() && i < width.size(); ++i)
      std::fprintf(out, "%-*s  ", static_cast<int>(width[i]), unquote(r.fields[i].second).c_str());
    std::fprintf(out, "\n");
  }
}

// {"benchmark": name, "cpu": ..., <extra>, "results": [rows]} on stdout.
inline void print_json(const std::string& name, const std::vector<Row>& rows,
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  std::string s = "{\"benchmark\": " + io::json_quote(name) +
                  ", \"cpu\": " + io::json_quote(cpu_features().model) +
                  ", \"kernel_level\": " + io::json_quote(isa_name(active_isa()));
  for (const auto& [k, v] : extra) s += ", " + io::json_quote(k) + ": " + v;
  s += ", \"results\": [";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    s += r ? ",\n  {" : "\n  {";
    for (std::size_t i = 0; i < rows[r].fields.size(); ++i)
      s += (i ? ", " : "") + io::json_quote(rows[r].fields[i].first) + ": " +
           rows[r].fields[i].second;
    s += "}";
  }
  s += "\n]}\n";
  std::fputs(s.c_str(), stdout);
}

}  // namespace mixprec::bench
