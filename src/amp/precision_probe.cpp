#include "mixprec/amp/precision_probe.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "mixprec/core/allocator.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/error.h"
#include "mixprec/core/precision.h"
#include "mixprec/core/random.h"
#include "mixprec/io/atomic_file.h"  // layer exceptions: see tools/check_layers.py
#include "mixprec/io/json.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/linalg.h"

namespace mixprec::amp {
namespace {

// The workload: one GEMM of a GPT-small MLP's shape for 256 tokens ([256, 384] x [384, 384])
// and one 3x3 convolution of a video U-Net's shape (32 -> 32 channels, 32x32, channels-last),
// ~94 MFLOP together: about a millisecond per dtype at the vector levels. The scalar reference
// kernels are ~100x slower, so there the GEMM takes 32 rows and the conv 16x16 pixels (~12
// MFLOP), which keeps the whole probe under a second there too.
struct Workload {
  int64_t gemm_m, gemm_k, gemm_n;
  int64_t conv_c, conv_hw, conv_o;
};
Workload workload_for(IsaLevel level) {
  return level == IsaLevel::Scalar ? Workload{32, 384, 384, 32, 16, 32}
                                   : Workload{256, 384, 384, 32, 32, 32};
}
constexpr int kMinRounds = 3, kMaxRounds = 9;
constexpr double kRoundBudgetMs = 300;  // stop adding rounds past this (after kMinRounds)

// Most precise first: the order ties are broken in.
constexpr std::array<DType, 3> kCandidates = {DType::F32, DType::BF16, DType::F16};

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double relative_rms_error(const Tensor& y, const Tensor& reference) {
  double diff = 0, norm = 0;
  accumulate_squared_error(y, reference, diff, norm);
  return std::sqrt(diff / norm);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string sci(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2g", v);
  return buf;
}

std::string name_of(DType t) { return std::string(dtype_name(t)); }

// ---- the cache file ----

struct CacheEntry {
  std::string cpu_model;
  std::string level;
  int64_t version = 0;
  std::vector<DTypeMeasurement> measurements;
};

const io::JsonValue& member(const io::JsonValue& object, std::string_view key,
                            io::JsonValue::Kind kind) {
  const io::JsonValue* v = object.is_object() ? object.find(key) : nullptr;
  MIXPREC_CHECK(v != nullptr && v->kind() == kind, "'", key, "' missing or not a ",
                io::JsonValue::kind_name(kind));
  return *v;
}

double number_or_inf(const io::JsonValue& object, std::string_view key) {
  const io::JsonValue* v = object.find(key);
  MIXPREC_CHECK(v != nullptr && (v->is_number() || v->is_null()), "'", key,
                "' missing or not a number");
  return v->is_null() ? std::numeric_limits<double>::infinity() : v->as_double();
}

DTypeMeasurement parse_measurement(const io::JsonValue& v) {
  DTypeMeasurement m;
  m.dtype = parse_dtype(member(v, "dtype", io::JsonValue::Kind::String).as_string());
  m.gemm_ms = number_or_inf(v, "gemm_ms");
  m.conv_ms = number_or_inf(v, "conv_ms");
  const auto peak = member(v, "peak_bytes", io::JsonValue::Kind::Number).as_uint64();
  MIXPREC_CHECK(peak.has_value(), "'peak_bytes' is not a byte count");
  m.peak_bytes = *peak;
  m.error = number_or_inf(v, "error");
  m.tolerance = number_or_inf(v, "tolerance");
  m.passed = member(v, "passed", io::JsonValue::Kind::Bool).as_bool();
  MIXPREC_CHECK(
      std::isfinite(m.gemm_ms) && std::isfinite(m.conv_ms) && m.gemm_ms >= 0 && m.conv_ms >= 0,
      "a time is not a finite non-negative number");
  return m;
}

// Every entry of the file; throws Error on anything malformed (the caller re-measures).
std::vector<CacheEntry> read_cache(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MIXPREC_CHECK(in.good(), "cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  MIXPREC_CHECK(text.str().size() <= (1u << 20), "larger than 1 MiB");
  const io::JsonValue root = io::parse_json(text.str(), {.context = "[precision cache]"});
  std::vector<CacheEntry> entries;
  for (const io::JsonValue& e : member(root, "entries", io::JsonValue::Kind::Array).items()) {
    CacheEntry entry;
    entry.cpu_model = member(e, "cpu_model", io::JsonValue::Kind::String).as_string();
    entry.level = member(e, "kernel_level", io::JsonValue::Kind::String).as_string();
    const auto version = member(e, "probe_version", io::JsonValue::Kind::Number).as_int64();
    MIXPREC_CHECK(version.has_value(), "'probe_version' is not an integer");
    entry.version = *version;
    if (entry.version != kPrecisionProbeVersion) continue;  // stale: dropped at the next write
    for (const io::JsonValue& m : member(e, "measurements", io::JsonValue::Kind::Array).items())
      entry.measurements.push_back(parse_measurement(m));
    // The decision is recomputed from the measurements; a stored one that disagrees means
    // the file was edited or damaged.
    const std::string& stored = member(e, "dtype", io::JsonValue::Kind::String).as_string();
    MIXPREC_CHECK(stored == name_of(choose_precision(entry.measurements).dtype),
                  "the stored decision '", stored, "' does not follow from its measurements");
    entries.push_back(std::move(entry));
  }
  return entries;
}

// Writes atomically (io::AtomicFile); throws Error on failure.
void write_cache(const std::string& path, const std::vector<CacheEntry>& entries) {
  std::string out = "{\"entries\": [";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const CacheEntry& e = entries[i];
    out += std::string(i ? ",\n" : "\n") + "  {\"cpu_model\": " + io::json_quote(e.cpu_model) +
           ", \"kernel_level\": " + io::json_quote(e.level) +
           ", \"probe_version\": " + std::to_string(e.version) +
           ", \"dtype\": " + io::json_quote(dtype_name(choose_precision(e.measurements).dtype)) +
           ",\n   \"measurements\": [";
    for (std::size_t j = 0; j < e.measurements.size(); ++j)
      out += std::string(j ? ",\n     " : "\n     ") + to_json(e.measurements[j]);
    out += "]}";
  }
  out += "\n]}\n";
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  io::AtomicFile file(path, "precision cache");
  file.write(out.data(), out.size());
  file.commit();
}

AutoPrecision decided(std::vector<DTypeMeasurement> measurements, IsaLevel level,
                      std::string source, std::string cache_path) {
  AutoPrecision a;
  PrecisionDecision d = choose_precision(measurements);
  a.dtype = d.dtype;
  a.level = level;
  a.cpu_model = cpu_features().model;
  a.source = std::move(source);
  a.measurements = std::move(measurements);
  a.cache_path = std::move(cache_path);
  a.decision = d.reasons.back();  // choose_precision ends with the line that decided
  a.reasons = std::move(d.reasons);
  return a;
}

}  // namespace

void accumulate_squared_error(const Tensor& y, const Tensor& reference, double& diff,
                              double& norm) {
  const Tensor a = y.to(DType::F64).contiguous(), r = reference.to(DType::F64).contiguous();
  const double* pa = a.data<double>();
  const double* pr = r.data<double>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::isfinite(pa[i]) ? pa[i] - pr[i] : HUGE_VAL;
    diff += d * d;
    norm += pr[i] * pr[i];
  }
}

std::string to_json(const DTypeMeasurement& m) {
  return "{\"dtype\": " + io::json_quote(dtype_name(m.dtype)) +
         ", \"gemm_ms\": " + io::json_number(m.gemm_ms, 17) +
         ", \"conv_ms\": " + io::json_number(m.conv_ms, 17) +
         ", \"peak_bytes\": " + std::to_string(m.peak_bytes) +
         ", \"error\": " + io::json_number(m.error, 17) +
         ", \"tolerance\": " + io::json_number(m.tolerance, 17) +
         ", \"passed\": " + (m.passed ? "true" : "false") + "}";
}

double precision_tolerance(DType dtype) {
  const auto unit_roundoff = [](DType t) { return std::ldexp(1.0, -(info(t).mantissa_bits + 1)); };
  return 4 * unit_roundoff(dtype) + 64 * unit_roundoff(DType::F32);
}

PrecisionDecision choose_precision(std::span<const DTypeMeasurement> measurements) {
  PrecisionDecision d;
  const DTypeMeasurement* fastest = nullptr;
  for (const DTypeMeasurement& m : measurements) {
    d.reasons.push_back(name_of(m.dtype) + ": " + fixed(m.total_ms(), 3) + " ms (GEMM " +
                        fixed(m.gemm_ms, 3) + " + conv " + fixed(m.conv_ms, 3) + "), peak " +
                        fixed(static_cast<double>(m.peak_bytes) / 1024.0, 0) + " KiB, error " +
                        sci(m.error) + (m.passed ? " <= " : " > ") + sci(m.tolerance) +
                        (m.passed ? ": passed" : ": FAILED the check, not a candidate"));
    if (m.passed && (fastest == nullptr || m.total_ms() < fastest->total_ms())) fastest = &m;
  }
  if (fastest == nullptr) {
    d.dtype = DType::F32;
    d.reasons.push_back("no dtype passed its check: f32 kept");
    return d;
  }
  const double limit = fastest->total_ms() * (1 + kPrecisionTieMargin);
  for (DType candidate : kCandidates)
    for (const DTypeMeasurement& m : measurements)
      if (m.dtype == candidate && m.passed && m.total_ms() <= limit) {
        d.dtype = m.dtype;
        if (&m == fastest)
          d.reasons.push_back(name_of(m.dtype) + " chosen: the fastest that passed");
        else
          d.reasons.push_back(name_of(m.dtype) + " chosen: within " +
                              fixed(100 * kPrecisionTieMargin, 0) + "% of the fastest (" +
                              name_of(fastest->dtype) + "), and more precise");
        for (const DTypeMeasurement& f32 : measurements)
          if (f32.dtype == DType::F32 && m.dtype != DType::F32 && f32.total_ms() > 0)
            d.reasons.back() += ", " + fixed(f32.total_ms() / m.total_ms(), 2) + "x f32's speed";
        return d;
      }
  // Only dtypes outside kCandidates passed: the fastest of them.
  d.dtype = fastest->dtype;
  d.reasons.push_back(name_of(fastest->dtype) + " chosen: the fastest that passed");
  return d;
}

std::vector<DTypeMeasurement> measure_precisions() {
  NoGrad no_grad;
  Autocast no_autocast(DType::BF16, false);
  const Workload wl = workload_for(dispatch_config().level);
  Generator gen(20261126);
  const Tensor a = Tensor::randn({wl.gemm_m, wl.gemm_k}, gen);
  const Tensor b = Tensor::randn({wl.gemm_k, wl.gemm_n}, gen);
  const Tensor x = Tensor::randn({1, wl.conv_c, wl.conv_hw, wl.conv_hw}, gen)
                       .contiguous(MemoryFormat::ChannelsLast);
  const Tensor w =
      Tensor::randn({wl.conv_o, wl.conv_c, 3, 3}, gen).contiguous(MemoryFormat::ChannelsLast);
  const Conv2dParams same{.padding = 1};
  const Tensor gemm_ref = matmul(a.to(DType::F64), b.to(DType::F64));
  const Tensor conv_ref = conv2d(x.to(DType::F64), w.to(DType::F64), Tensor(), same);
  // A copy in dtype t even where t is the source's dtype, so that every dtype's peak counts its
  // operands.
  const auto copy_as = [](const Tensor& src, DType t) {
    Tensor copy = Tensor::empty_like(src, t);
    copy.copy_(src);
    return copy;
  };

  struct Operands {
    Tensor a, b, x, w;
  };
  std::vector<Operands> operands;
  std::vector<DTypeMeasurement> out;
  CachingAllocator& allocator = CachingAllocator::global();
  for (DType t : kCandidates) {
    // Untimed first run: the peak (operands in this dtype included) and the check.
    allocator.reset_peak();
    const std::size_t before = allocator.stats().allocated_bytes;
    Operands o{copy_as(a, t), copy_as(b, t), copy_as(x, t), copy_as(w, t)};
    const Tensor y = matmul(o.a, o.b);
    const Tensor z = conv2d(o.x, o.w, Tensor(), same);
    DTypeMeasurement m;
    m.dtype = t;
    m.peak_bytes = allocator.stats().peak_allocated_bytes - before;
    m.error = std::max(relative_rms_error(y, gemm_ref), relative_rms_error(z, conv_ref));
    m.tolerance = precision_tolerance(t);
    m.passed = m.error <= m.tolerance;
    out.push_back(m);
    operands.push_back(std::move(o));
  }

  std::vector<std::vector<double>> gemm_ms(out.size()), conv_ms(out.size());
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round >= kMinRounds && ms_since(start) > kRoundBudgetMs) break;
    for (std::size_t i = 0; i < out.size(); ++i) {
      Clock::time_point t0 = Clock::now();
      (void)matmul(operands[i].a, operands[i].b);
      gemm_ms[i].push_back(ms_since(t0));
      t0 = Clock::now();
      (void)conv2d(operands[i].x, operands[i].w, Tensor(), same);
      conv_ms[i].push_back(ms_since(t0));
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].gemm_ms = median(gemm_ms[i]);
    out[i].conv_ms = median(conv_ms[i]);
  }
  return out;
}

std::string precision_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/mixprec/precision-probe.json";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0')
    return std::string(home) + "/.cache/mixprec/precision-probe.json";
  return "";
}

AutoPrecision auto_precision(const std::string& cache_path, bool remeasure) {
  const IsaLevel level = dispatch_config().level;
  const std::string model = cpu_features().model;
  const std::string level_name(isa_name(level));
  std::vector<CacheEntry> entries;
  std::string cache_note;
  std::error_code exists_error;
  if (!cache_path.empty() && std::filesystem::exists(cache_path, exists_error)) {
    try {
      entries = read_cache(cache_path);
    } catch (const std::exception& e) {
      cache_note = "cache " + cache_path + " unreadable (" + e.what() + "): re-measured";
    }
  }
  const auto matches = [&](const CacheEntry& e) {
    return e.cpu_model == model && e.level == level_name && e.version == kPrecisionProbeVersion;
  };
  if (!remeasure)
    for (const CacheEntry& e : entries)
      if (matches(e)) {
        AutoPrecision a = decided(e.measurements, level, "cache", cache_path);
        a.reasons.insert(a.reasons.begin(), "measured at kernel level " + level_name +
                                                " earlier, read from " + cache_path);
        return a;
      }

  std::vector<DTypeMeasurement> measurements;
  try {
    measurements = measure_precisions();
  } catch (const Error& e) {
    const PrecisionChoice h = recommended_precision();
    AutoPrecision a;
    a.dtype = h.dtype;
    a.level = level;
    a.cpu_model = model;
    a.source = "heuristic";
    a.reasons = {std::string("the probe could not run (") + e.what() +
                     "): falling back to the CPU-feature heuristic",
                 h.reason};
    a.decision = h.reason;
    return a;
  }
  AutoPrecision a = decided(measurements, level, "measured", cache_path);
  a.reasons.insert(a.reasons.begin(), "measured now at kernel level " + level_name);
  if (!cache_note.empty()) a.reasons.push_back(cache_note);
  if (!cache_path.empty()) {
    std::erase_if(entries, matches);
    entries.push_back({model, level_name, kPrecisionProbeVersion, measurements});
    try {
      write_cache(cache_path, entries);
    } catch (const std::exception& e) {
      a.reasons.push_back(std::string("not cached: ") + e.what());
    }
  }
  return a;
}

std::string AutoPrecision::summary() const {
  return std::string(dtype_name(dtype)) + " (" + source + " at kernel level " +
         std::string(isa_name(level)) + ": " + decision + ")";
}

const AutoPrecision& auto_precision() {
  static std::mutex mutex;
  static std::map<IsaLevel, AutoPrecision> memo;
  const IsaLevel level = dispatch_config().level;
  std::lock_guard lock(mutex);
  auto it = memo.find(level);
  if (it == memo.end()) it = memo.emplace(level, auto_precision(precision_cache_path())).first;
  return it->second;
}

}  // namespace mixprec::amp

namespace mixprec::amp {

DType agreed_auto_precision(const Communicator& world) {
  auto code = static_cast<uint8_t>(world.is_root() ? auto_precision().dtype : DType::F32);
  if (world.size() > 1) world.broadcast(&code, sizeof code, 0);
  return static_cast<DType>(code);
}

}  // namespace mixprec::amp
