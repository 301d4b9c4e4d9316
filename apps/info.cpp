// `mixprec info`: what this machine offers mixed precision, for people and (--json) scripts.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.h"
#include "mixprec/amp/precision_probe.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dispatch.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/precision.h"
#include "mixprec/io/json.h"

namespace mixprec::app {
namespace {

struct Feature {
  const char* name;
  bool present;
};

std::vector<Feature> feature_list(const CpuFeatures& f) {
  return {{"avx2", f.avx2 && f.os_avx},
          {"fma", f.fma && f.os_avx},
          {"f16c", f.f16c && f.os_avx},
          {"avx512f", f.avx512f && f.os_avx512},
          {"avx512bw", f.avx512bw && f.os_avx512},
          {"avx512vl", f.avx512vl && f.os_avx512},
          {"avx512dq", f.avx512dq && f.os_avx512},
          {"avx512_bf16", f.avx512_bf16 && f.os_avx512},
          {"avx512_fp16", f.avx512_fp16 && f.os_avx512},
          {"amx_tile", f.amx_tile && f.os_amx},
          {"amx_bf16", f.amx_bf16 && f.os_amx}};
}

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

int run_info(Args args) {
  bool json = false, reprobe = false;
  for (std::string_view a : args) {
    if (a == "--json") {
      json = true;
    } else if (a == "--reprobe") {
      reprobe = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "Usage: mixprec info [--json] [--reprobe]\n\n"
          "Prints the CPU, the ISA features found (with OS support), the kernel level in use,\n"
          "the precision `--precision auto` picks with the probe's measurements and reasons,\n"
          "and the thread count.\n\n"
          "  --reprobe  measure again instead of reading the probe's cache\n"
          "             ($XDG_CACHE_HOME or ~/.cache: mixprec/precision-probe.json)\n");
      return 0;
    } else {
      throw UsageError{"info: unknown option '" + std::string(a) + "' (see 'mixprec info --help')"};
    }
  }

  const CpuFeatures& f = cpu_features();
  const DispatchConfig dispatch = dispatch_config();  // throws on a bad MIXPREC_ISA etc.
  const IsaLevel level = dispatch.level;
  const std::string_view bf16_conv = bf16_conv_compute_name(dispatch.bf16_conv);
  const PrecisionChoice heuristic = recommended_precision(f);
  const amp::AutoPrecision precision =
      reprobe ? amp::auto_precision(amp::precision_cache_path(), true) : amp::auto_precision();
  std::string reasons;
  for (const std::string& r : precision.reasons) reasons += (reasons.empty() ? "" : "; ") + r;
  const std::vector<Feature> features = feature_list(f);
  const std::string_view best = isa_name(best_isa());
  const std::string_view in_use = isa_name(level);

  if (json) {
    std::string out = "{\n";
    out += "  \"cpu_model\": " + io::json_quote(f.model) + ",\n";
    out += "  \"vendor\": " + io::json_quote(f.vendor) + ",\n";
    out += "  \"logical_cores\": " + std::to_string(f.logical_cores) + ",\n";
    out += "  \"features\": {";
    for (std::size_t i = 0; i < features.size(); ++i)
      out += std::string(i ? ", " : "") + io::json_quote(features[i].name) + ": " +
             (features[i].present ? "true" : "false");
    out += "},\n";
    out += "  \"kernel_level\": " + io::json_quote(in_use) + ",\n";
    out += "  \"best_kernel_level\": " + io::json_quote(best) + ",\n";
    out +=
        "  \"kernel_level_forced\": " + std::string(std::getenv("MIXPREC_ISA") ? "true" : "false") +
        ",\n";
    out += "  \"bf16_conv_compute\": " + io::json_quote(bf16_conv) + ",\n";
    out += "  \"pack_inference_weights\": " +
           std::string(dispatch.pack_inference_weights ? "true" : "false") + ",\n";
    out += "  \"recommended_precision\": " + io::json_quote(dtype_name(precision.dtype)) + ",\n";
    out += "  \"precision_reason\": " + io::json_quote(reasons) + ",\n";
    out += "  \"precision_probe\": {\"source\": " + io::json_quote(precision.source) +
           ", \"kernel_level\": " + io::json_quote(isa_name(precision.level)) +
           ", \"probe_version\": " + std::to_string(amp::kPrecisionProbeVersion) +
           ", \"cache\": " + io::json_quote(precision.cache_path) + ",\n    \"measurements\": [";
    for (std::size_t i = 0; i < precision.measurements.size(); ++i)
      out += std::string(i ? ",\n      " : "\n      ") + amp::to_json(precision.measurements[i]);
    out += "],\n    \"reasons\": [";
    for (std::size_t i = 0; i < precision.reasons.size(); ++i)
      out += std::string(i ? ", " : "") + io::json_quote(precision.reasons[i]);
    out += "]},\n";
    out += "  \"cpu_feature_precision\": " + io::json_quote(dtype_name(heuristic.dtype)) + ",\n";
    out += "  \"threads\": " + std::to_string(num_threads()) + "\n}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  std::printf("mixprec 0.1.0\n");
  std::printf("CPU            %s (%s), %d logical cores\n", f.model.c_str(), f.vendor.c_str(),
              f.logical_cores);
  std::printf("ISA features  ");
  for (const Feature& feature : features)
    if (feature.present) std::printf(" %s", feature.name);
  std::printf("\nNot available ");
  bool all_present = true;
  for (const Feature& feature : features)
    if (!feature.present) {
      std::printf(" %s", feature.name);
      all_present = false;
    }
  if (all_present) std::printf(" (none)");
  std::printf("\nKernel level   %.*s (best on this CPU: %.*s; MIXPREC_ISA %s)\n",
              static_cast<int>(in_use.size()), in_use.data(), static_cast<int>(best.size()),
              best.data(), env_or("MIXPREC_ISA", "not set"));
  std::printf("Dispatch       bf16 conv %.*s, inference weights %s\n",
              static_cast<int>(bf16_conv.size()), bf16_conv.data(),
              dispatch.pack_inference_weights ? "packed" : "packed per call");
  const std::string_view p = dtype_name(precision.dtype);
  std::printf("Precision      auto -> %.*s (%s at kernel level %.*s%s%s)\n",
              static_cast<int>(p.size()), p.data(), precision.source.c_str(),
              static_cast<int>(isa_name(precision.level).size()), isa_name(precision.level).data(),
              precision.cache_path.empty() ? "" : "; cache ", precision.cache_path.c_str());
  for (const std::string& r : precision.reasons) std::printf("               %s\n", r.c_str());
  const std::string_view h = dtype_name(heuristic.dtype);
  std::printf("               (the CPU features alone would say %.*s)\n",
              static_cast<int>(h.size()), h.data());
  std::printf("Threads        %d (MIXPREC_NUM_THREADS %s)\n", num_threads(),
              env_or("MIXPREC_NUM_THREADS", "not set"));
  return 0;
}

}  // namespace mixprec::app
