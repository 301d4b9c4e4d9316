#pragma once
// Gradient clipping by the total norm over every gradient (torch.nn.utils.clip_grad_norm_).
//
//   scaler.unscale(opt);                                   // clip the true gradients...
//   double norm = nn::clip_grad_norm(model.parameters(), 1.0);
//   scaler.step(opt);                                      // ...then step (or skip)
//
// The norm is accumulated in f64 over every element of every defined .grad() (16-bit, f32 or
// the f32 gradients GradScaler::unscale leaves), in a fixed order, so it is the same on every
// ISA level and thread count. When norm > max_norm every gradient is multiplied by
// max_norm / (norm + 1e-6), computed in f32 and rounded once into the gradient's dtype.
//
// A non-finite norm (an inf or NaN gradient) is returned and the gradients are left as they are
// (PyTorch would multiply them by 0 or NaN): after GradScaler::unscale the scaler has already
// seen the overflow and will skip the step, so there is nothing to rescue. With
// `error_if_nonfinite` it throws an Error instead, as PyTorch's option does.
#include <vector>

#include "mixprec/core/tensor.h"

namespace mixprec::nn {

// norm_type: any p > 0, or infinity for the largest |g|. Returns the total norm (before
// clipping). Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// The total norm alone, without clipping.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

}  // namespace mixprec::nn
