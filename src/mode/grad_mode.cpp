#include "mixprec/mode/grad_mode.h"

namespace mixprec {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
bool inference_mode_enabled() { return t_inference_mode; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_enabled) {
  t_grad_enabled = enabled && !t_inference_mode;
}
GradModeGuard::~GradModeGuard() { t_grad_enabled = previous_; }

InferenceMode::InferenceMode()
    : previous_grad_(t_grad_enabled), previous_inference_(t_inference_mode) {
  t_grad_enabled = false;
  t_inference_mode = true;
}
InferenceMode::~InferenceMode() {
  t_grad_enabled = previous_grad_;
  t_inference_mode = previous_inference_;
}

}  // namespace mixprec
