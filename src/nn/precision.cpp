#include "mixprec/nn/precision.h"

namespace mixprec::nn {

void to_precision(Module& model, const amp::PrecisionConfig& p) {
  if (!p.half_params()) return;
  if (p.keep_f32)
    model.to(p.params);  // Module::is_norm_layer keeps the norms f32
  else
    model.to(p.params, [](const Module&) { return false; });
}

}  // namespace mixprec::nn
