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
  // [1] i64, or undefined: only keys [0, last_key] take part (0 <= last_key < Sk), the value
  // read when the kernel runs, so a graph replay sees each call's: a decoding step over a
  // preallocated KV cache at the position the tensor holds. Inference only (refused while
  // gradients are recorded).
  Tensor last_key = Tensor();
};

// q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv] -> [B, H, Sq, Dv] in q's dtype.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionParams& params = {});

// Multi-head attention over a packed projection: qkv [B, T, 3 * D] (q, k, v concatenated on the
// last dim, each D = heads * hd wide) -> y [B, T, D], y[b, t, h * hd + j] = head h's output.
// Bit for bit what slicing q, k, v out of qkv as [B, heads, T, hd] views, then
// scaled_dot_product_attention, then merging the heads back (permute + reshape) gives, without
// the copies: the kernel reads the heads from qkv in place and writes them straight into y, and
// the backward writes the three head gradients into one d_qkv. Autocast as
// scaled_dot_product_attention.
Tensor multi_head_attention_packed(const Tensor& qkv, int64_t heads,
                                   const AttentionParams& params = {});

}  // namespace mixprec
