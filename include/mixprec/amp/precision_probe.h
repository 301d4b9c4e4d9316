#pragma once
// `--precision auto`, measured: a short probe times a representative workload (a GEMM of a
// transformer's MLP size and a 3x3 convolution of the video model's size, through the real
// kernels; smaller at the scalar level, whose reference kernels are ~100x slower) in f32, f16 and
// bf16 at the kernel level in force (dispatch_config().level, which MIXPREC_ISA forces), checks
// each result against an f64 reference, and picks the fastest dtype whose check passed. The
// decision and its measurements are cached per machine and level in a small JSON file, so the probe
// runs once per machine (a corrupt or unwritable cache is never an error: the probe re-measures).
// core's CPU-feature heuristic (recommended_precision) is only what `auto` falls back to when the
// probe cannot run.
//
// The probe needs kernels and ops, so it lives here in amp, above them; PrecisionConfig's "auto"
// and the command line's `mixprec info` read auto_precision().
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mixprec/core/communicator.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dtype.h"
#include "mixprec/core/tensor.h"

namespace mixprec::amp {

// Bumped whenever the workload or the rule changes, so older cached decisions are re-measured.
inline constexpr int kPrecisionProbeVersion = 1;

// A lower precision is chosen over a more precise one only when it is more than this much
// faster: timings on a shared machine move by a few percent from run to run (measured on the
// Zen 4 dev machine: at the avx2 and avx512 levels f32, bf16 and f16 come within 3-6% of each
// other and a 5% margin flipped the decision between runs), and a gain that small is not worth
// the precision.
inline constexpr double kPrecisionTieMargin = 0.10;

// One dtype's measurements.
struct DTypeMeasurement {
  DType dtype = DType::F32;
  double gemm_ms = 0;          // median over the timed rounds
  double conv_ms = 0;          // median over the timed rounds
  std::size_t peak_bytes = 0;  // allocator peak while it ran: operands, outputs, workspace
  double error = 0;            // relative RMS error vs f64 (the worse of GEMM and conv)
  double tolerance = 0;        // what the check allows for this dtype
  bool passed = false;         // finite and error <= tolerance
  double total_ms() const { return gemm_ms + conv_ms; }
};
// One line of JSON: {"dtype": "bf16", "gemm_ms": ..., "passed": true} (what the cache stores and
// `mixprec info --json` prints), numbers with 17 digits so that they read back exactly.
std::string to_json(const DTypeMeasurement& m);

// The rule, a pure function: among the dtypes whose check passed, the most precise one (f32,
// then bf16, then f16) whose time is within kPrecisionTieMargin of the fastest; f32 when none
// passed. Each reason is one line for people.
struct PrecisionDecision {
  DType dtype = DType::F32;
  std::vector<std::string> reasons;
};
PrecisionDecision choose_precision(std::span<const DTypeMeasurement> measurements);

// Runs the probe at dispatch_config().level (a few rounds, f32/f16/bf16 interleaved so that load
// from other work falls on all three alike). Throws Error when a kernel fails.
std::vector<DTypeMeasurement> measure_precisions();

// Adds the squared differences of y from reference (any float dtypes, same shape) to `diff` and
// reference's squares to `norm`, in f64; a non-finite y makes `diff` infinite. sqrt(diff / norm)
// is the relative RMS error the probe's check and the precision planner measure.
void accumulate_squared_error(const Tensor& y, const Tensor& reference, double& diff, double& norm);

// The check's bound for a dtype: 4 units of roundoff of its storage (inputs and output are
// rounded to it) plus 64 of f32 (the accumulation over a few hundred terms).
double precision_tolerance(DType dtype);

struct AutoPrecision {
  DType dtype = DType::F32;
  IsaLevel level = IsaLevel::Scalar;  // the kernel level measured at
  std::string cpu_model;
  std::string source;  // "measured", "cache" or "heuristic" (the probe could not run)
  std::vector<DTypeMeasurement> measurements;  // empty for "heuristic"
  std::vector<std::string> reasons;
  std::string decision;    // the reason that decided (one of `reasons`)
  std::string cache_path;  // empty when there is none
  // One line for a trainer's log: "bf16 (measured at kernel level avx2: bf16 chosen: ...)".
  std::string summary() const;
};

// $XDG_CACHE_HOME/mixprec/precision-probe.json, else ~/.cache/mixprec/precision-probe.json;
// empty when neither variable is set (then nothing is cached).
std::string precision_cache_path();

// The decision for this machine at the level in force: read from `cache_path` when it holds
// one for this CPU model, level and probe version (and `remeasure` is false), else measured and
// written there. An unreadable, corrupt or unwritable cache only adds a reason.
AutoPrecision auto_precision(const std::string& cache_path, bool remeasure = false);
// The same with precision_cache_path(), remembered per level for the life of the process.
const AutoPrecision& auto_precision();
// What `auto` means for every rank of `world` (data-parallel training): rank 0's
// auto_precision() dtype, broadcast, since ranks measuring each for themselves may disagree.
// Only rank 0 runs the probe.
DType agreed_auto_precision(const Communicator& world);

}  // namespace mixprec::amp
