#pragma once
// Scaled dot-product attention, flash style: softmax(q k^T * scale + mask) v computed in
// blocks of queries and keys with an online softmax (f32 running max and sum per query), so
// the extra memory is O(seq * head_dim) per thread, never the O(seq^2) score matrix.
//
// q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv] -> out [B, H, Sq, Dv]; any strides, f32,
// bf16 or f16 (out may be any of those). Both products accumulate in f32; with bf16 q, k and v
// they run on vdpbf16ps, the probabilities rounded to bf16 for the second product (as flash
// attention does) and their row sums taken over the rounded values. f64 q, k, v and out (for
// gradient checks) run the definition row by row in double; the backward then runs the same
// blocked algorithm on f64 products.
#include <cstdint>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels {

struct AttentionOptions {
  float scale = 0.0f;            // 0: 1 / sqrt(D)
  bool causal = false;           // key j is visible to query i only when j <= i (top-left aligned)
  const Tensor* mask = nullptr;  // additive, broadcastable to [B, H, Sq, Sk]; -inf hides a key
  // The most keys later calls will bring (0: Sk): the per-thread packing space is reserved for
  // them at once, so a decoding step whose keys grow call by call (graph replays over a KV
  // cache) allocates nothing after its first call. Forward only.
  int64_t key_capacity = 0;
};

// A query that sees no key (every score -inf) gets an output of zeros, not NaN.
// When `logsumexp` is given (f32 [B, H, Sq]) it receives the row's log-sum-exp of the scaled
// scores, what a flash-style backward needs to recompute the probabilities.
void scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const AttentionOptions& options = {},
                                  const Tensor* logsumexp = nullptr);

// The gradients of scaled_dot_product_attention, flash style: per (batch, head) and block of
// queries x keys the probabilities are recomputed from the forward's `logsumexp` (never stored
// whole), then dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * out)), dQ += scale dS K,
// dK += scale dS^T Q. q, k, v, out, grad_out as for the forward (any strides, last dim
// contiguous); dq, dk, dv have q's, k's and v's shapes, any float dtype, last dim contiguous.
// Every product accumulates in f32 and each gradient is rounded once, on its final write. When
// q, k, v and grad_out are all bf16, P and dS are rounded to bf16 for the products that take
// them (as flash attention does), so all five run on bf16 GEMMs (AMX where usable); otherwise
// P and dS stay f32.
void scaled_dot_product_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, const Tensor& grad_out,
                                           const Tensor& logsumexp, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv,
                                           const AttentionOptions& options = {});

}  // namespace mixprec::kernels
