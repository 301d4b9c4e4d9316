#pragma once
// Differentiable scaled dot-product attention over the flash-style kernel. The backward is
// flash-style too: it recomputes the probabilities block by block from the saved log-sum-exp,
// so no [Sq, Sk] matrix is ever stored (O(seq * head_dim) memory).
#include "mixprec/core/tensor.h"

namespace mixprec {

struct AttentionParams {
  bool causal = false;
  Tensor mask = Tensor();  // additive, broadcastable to [B, H, Sq, Sk] (no gradient flows into it)
  float scale = 0.0f;      // 0: 1 / sqrt(head_dim)
};

// q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv] -> [B, H, Sq, Dv] in q's dtype.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionParams& params = {});

}  // namespace mixprec
