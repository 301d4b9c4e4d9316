#pragma once
// One value that says how a model trains or runs: in which dtype its matrix products compute
// (autocast), in which dtype its parameters are stored, and how the loss is scaled. The
// command line's `--precision` parses into it.
//
//   name          compute  params  loss scaling   what it is
//   fp32          f32      f32     none           the reference
//   bf16          bf16     f32     none           autocast (PyTorch AMP's bf16 recipe)
//   fp16          f16      f32     dynamic        autocast + GradScaler (PyTorch AMP's f16 recipe)
//   bf16-params   bf16     bf16    none           true half precision: 16-bit weights, f32 master
//   fp16-params   f16      f16     dynamic        weights in the optimizer (norms stay f32)
//   auto          what the precision probe measured fastest here (amp/precision_probe.h)
//   plan:FILE     f32, with the parameters of the modules a per-layer plan names stored in its
//                 dtype for each (amp/precision_plan.h; no autocast, no loss scaling)
#include <memory>
#include <string>
#include <string_view>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/amp/precision_plan.h"
#include "mixprec/core/dtype.h"

namespace mixprec::amp {

enum class LossScaling { None, Static, Dynamic };

struct PrecisionConfig {
  DType compute = DType::F32;  // the autocast dtype; f32 means autocast off
  DType params = DType::F32;   // parameter storage; 16-bit needs an optimizer with master weights
  bool keep_f32 = true;        // with 16-bit params, norm layers keep f32 parameters
  LossScaling loss_scaling = LossScaling::None;
  // A per-layer plan (plan:FILE): nn::to_precision stores the named modules' parameters in
  // their planned dtypes. Shared: configs are copied freely.
  std::shared_ptr<const PrecisionPlan> plan;

  // The preset of the dtype auto_precision() chose for this machine and kernel level: measured
  // once (and cached), the CPU-feature heuristic only when the probe cannot run.
  static PrecisionConfig auto_detect();
  // The autocast preset computing in `dtype`: bf16 -> "bf16", f16 -> "fp16" (with loss
  // scaling), anything else "fp32".
  static PrecisionConfig for_compute(DType dtype);
  // One of the names above; an Error listing them otherwise.
  static PrecisionConfig parse(std::string_view name);

  bool autocast() const { return compute != DType::F32; }
  bool half_params() const { return params != DType::F32; }
  // The table's name for a preset, "plan:h.0=bf16,..." for a plan, else a description.
  std::string name() const;
  // The GradScaler this configuration trains with (disabled when there is no loss scaling).
  GradScalerOptions scaler_options() const;
};

}  // namespace mixprec::amp
