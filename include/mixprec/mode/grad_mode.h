#pragma once
// Whether ops record an autograd graph, per thread, as RAII guards (PyTorch's torch.no_grad,
// torch.enable_grad, torch.inference_mode). Part of the mode layer (docs/ARCHITECTURE.md):
// ops read it to decide whether to record, autograd to build and run graphs.
namespace mixprec {

bool grad_enabled();
bool inference_mode_enabled();

// Sets whether ops record for a scope (never inside InferenceMode) and restores the previous
// mode on exit: what NoGrad and EnableGrad are.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Ops record nothing inside.
struct NoGrad : GradModeGuard {
  NoGrad() : GradModeGuard(false) {}
};

// Turns recording back on inside a NoGrad region (not inside InferenceMode).
struct EnableGrad : GradModeGuard {
  EnableGrad() : GradModeGuard(true) {}
};

// NoGrad, and also nothing that autograd could need later is kept (no graph, no saved tensors,
// no view tracking): the mode for serving. Nestable.
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool previous_grad_;
  bool previous_inference_;
};

}  // namespace mixprec
