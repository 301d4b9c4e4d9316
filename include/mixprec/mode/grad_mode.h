#pragma once
// Whether ops record an autograd graph, per thread, as RAII guards (PyTorch's torch.no_grad,
// torch.enable_grad, torch.inference_mode). Part of the mode layer (docs/ARCHITECTURE.md):
// ops read it to decide whether to record, autograd to build and run graphs.
namespace mixprec {

bool grad_enabled();
bool inference_mode_enabled();

// Ops record nothing inside; restores the previous mode on exit.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// Turns recording back on inside a NoGrad region (not inside InferenceMode).
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool previous_;
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
