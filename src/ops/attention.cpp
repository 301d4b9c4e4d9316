// SDPA front-ends (q, k, v apart, or packed in one [B, T, 3D] projection) and their backward
// nodes; the forward and the flash-style backward (f64 included) are kernels/attention.h.
#include "mixprec/ops/attention.h"

#include <cmath>
#include <vector>

#include "mixprec/autograd/node.h"
#include "mixprec/core/capture.h"
#include "mixprec/kernels/attention.h"
#include "mixprec/mode/grad_mode.h"
#include "op_util.h"

namespace mixprec {
namespace {

// The kernels' options; `mask` (expanded, or undefined) must outlive them.
kernels::AttentionOptions options(bool causal, float scale, const Tensor& mask) {
  kernels::AttentionOptions opt;
  opt.causal = causal;
  opt.scale = scale;
  opt.mask = mask.defined() ? &mask : nullptr;
  return opt;
}

struct SdpaBackward : autograd::Node {
  Tensor q, k, v, out, lse, mask;  // mask expanded to [B, H, Sq, Sk] or undefined
  bool causal = false;
  float scale = 1.0f;
  std::string_view name() const override { return "ScaledDotProductAttentionBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    Tensor dq = Tensor::empty(q.shape(), q.dtype()), dk = Tensor::empty(k.shape(), k.dtype()),
           dv = Tensor::empty(v.shape(), v.dtype());
    backward_into(grads[0], dq, dk, dv);
    return {dq, dk, dv};
  }

  // Writes every element of dq, dk, dv (q's, k's and v's shapes; any strides with the last dim
  // contiguous) from the output gradient `grad` [B, H, Sq, Dv].
  void backward_into(const Tensor& grad, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    auto last_dim_contiguous = [](const Tensor& t) {
      return t.stride(3) == 1 || t.size(3) == 1 ? t : t.contiguous();
    };
    const Tensor qc = last_dim_contiguous(q), kc = last_dim_contiguous(k),
                 vc = last_dim_contiguous(v), oc = last_dim_contiguous(out),
                 gc = last_dim_contiguous(grad), lc = lse.contiguous();
    capture::launch("attention_backward",
                    {&qc, &kc, &vc, &oc, &gc, &lc, mask.defined() ? &mask : nullptr},
                    {&dq, &dk, &dv},
                    [causal = causal, scale = scale](const capture::KernelArgs& a) {
                      static const Tensor none;
                      const Tensor* m = a.optional(6);
                      kernels::scaled_dot_product_attention_backward(
                          a.in(0), a.in(1), a.in(2), a.in(3), a.in(4), a.in(5), a.out(0),
                          a.out(1), a.out(2), options(causal, scale, m != nullptr ? *m : none));
                    });
  }
  void release_saved() override { q = k = v = out = lse = mask = Tensor(); }
};

// [B, T, H * hd] (last dim contiguous) -> its [B, H, T, hd] view, no copy.
Tensor split_heads(const Tensor& t, int64_t heads) {
  return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).permute({0, 2, 1, 3});
}

// Part 0, 1 or 2 (q, k or v) of a packed [B, T, 3D] tensor as [B, H, T, hd] heads, no copy.
Tensor packed_heads(const Tensor& qkv, int64_t part, int64_t heads) {
  const int64_t d = qkv.size(2) / 3;
  return split_heads(qkv.slice(2, part * d, (part + 1) * d), heads);
}

// multi_head_attention_packed: q, k, v and out are the saved head views of qkv and y. The three
// head gradients are written straight into the slices of one d_qkv, every element of it, so it
// needs no zero fill and there is nothing to sum.
struct PackedAttentionBackward final : SdpaBackward {
  std::string_view name() const override { return "MultiHeadAttentionPackedBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
    const Tensor d_qkv = Tensor::empty({B, T, 3 * H * hd}, q.dtype());
    // reshape, not view: a gradient that cannot be viewed as heads (an expanded one, say) is
    // copied; backward_into takes any strides with the last dim contiguous.
    const Tensor grad = grads[0].reshape({B, T, H, hd}).permute({0, 2, 1, 3});
    backward_into(grad, packed_heads(d_qkv, 0, H), packed_heads(d_qkv, 1, H),
                  packed_heads(d_qkv, 2, H));
    return {d_qkv};
  }
};

// The front-ends' common part: attention of q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv]
// (checked, same dtype when f64) into out [B, H, Sq, Dv] (any strides, last dim contiguous).
// With a `node` (the caller records it) it also saves what the backward needs.
void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const AttentionParams& params, SdpaBackward* node) {
  const int64_t B = q.size(0), H = q.size(1), sq = q.size(2), d = q.size(3);
  const float scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  Tensor lse = node != nullptr ? Tensor::empty({B, H, sq}, DType::F32) : Tensor();
  Tensor mask =
      params.mask.defined() ? params.mask.detach().expand({B, H, sq, k.size(2)}) : Tensor();
  const Tensor& last_key = params.last_key;
  if (last_key.defined())
    MIXPREC_CHECK(last_key.shape() == Shape{1} && last_key.dtype() == DType::I64 && node == nullptr,
                  "[scaled_dot_product_attention] last_key must be an i64 [1] tensor, and is for "
                  "inference (no gradients)");
  {
    NoGrad no_grad;
    const bool causal = params.causal;
    capture::launch(
        "attention",
        {&q, &k, &v, mask.defined() ? &mask : nullptr, last_key.defined() ? &last_key : nullptr},
        {&out, lse.defined() ? &lse : nullptr}, [causal, scale](const capture::KernelArgs& a) {
          Tensor k = a.in(1), v = a.in(2), m = a.optional(3) ? *a.optional(3) : Tensor();
          kernels::AttentionOptions opt = options(causal, scale, m);
          if (const Tensor* last = a.optional(4)) {  // keys [0, *last] only
            const int64_t keys = last->data<int64_t>()[0] + 1;
            MIXPREC_CHECK(keys >= 1 && keys <= k.size(2),
                          "[scaled_dot_product_attention] last_key ", keys - 1,
                          " is out of range for ", k.size(2), " keys");
            opt.key_capacity = k.size(2);
            k = k.narrow(2, 0, keys);
            v = v.narrow(2, 0, keys);
            if (m.defined()) m = m.narrow(3, 0, keys);
          }
          opt.mask = m.defined() ? &m : nullptr;
          kernels::scaled_dot_product_attention(a.in(0), k, v, a.out(0), opt, a.outputs[1]);
        });
  }
  if (node != nullptr) {
    node->q = q.detach();
    node->k = k.detach();
    node->v = v.detach();
    node->out = out.detach();
    node->lse = lse;
    node->mask = mask;
    node->causal = params.causal;
    node->scale = scale;
  }
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionParams& params) {
  const auto [q, k, v] =
      amp::autocast_args(amp::AutocastOp::ScaledDotProductAttention, q_in, k_in, v_in);
  for (const Tensor* t : {&q, &k, &v}) ops_detail::check_float("scaled_dot_product_attention", *t);
  MIXPREC_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                "[scaled_dot_product_attention] expected 4-D q, k, v, got ",
                shape_to_string(q.shape()), ", ", shape_to_string(k.shape()), ", ",
                shape_to_string(v.shape()));
  if (q.dtype() == DType::F64)
    MIXPREC_CHECK(k.dtype() == DType::F64 && v.dtype() == DType::F64,
                  "[scaled_dot_product_attention] f64 runs only when q, k and v are all f64");
  Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype());
  const auto node = autograd::needs_grad({&q, &k, &v}) ? std::make_shared<SdpaBackward>() : nullptr;
  run_attention(q, k, v, out, params, node.get());
  if (node) autograd::record(node, {&q, &k, &v}, {&out});
  return out;
}

Tensor multi_head_attention_packed(const Tensor& qkv_in, int64_t heads,
                                   const AttentionParams& params) {
  const auto [qkv_cast] = amp::autocast_args(amp::AutocastOp::ScaledDotProductAttention, qkv_in);
  ops_detail::check_float("multi_head_attention_packed", qkv_cast);
  MIXPREC_CHECK(heads >= 1, "[multi_head_attention_packed] heads must be >= 1, got ", heads);
  MIXPREC_CHECK(qkv_cast.dim() == 3 && qkv_cast.size(2) % (3 * heads) == 0,
                "[multi_head_attention_packed] expected qkv [B, T, 3 * D] with D a multiple of ",
                heads, " heads, got ", shape_to_string(qkv_cast.shape()));
  // The heads are views of qkv: they need its last dim contiguous.
  const Tensor qkv = qkv_cast.stride(2) == 1 ? qkv_cast : qkv_cast.contiguous();
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3;
  Tensor y = Tensor::empty({B, T, D}, qkv.dtype());
  const Tensor x = qkv.detach();
  const auto node =
      autograd::needs_grad({&qkv}) ? std::make_shared<PackedAttentionBackward>() : nullptr;
  run_attention(packed_heads(x, 0, heads), packed_heads(x, 1, heads), packed_heads(x, 2, heads),
                split_heads(y, heads), params, node.get());
  if (node) autograd::record(node, {&qkv}, {&y});
  return y;
}

}  // namespace mixprec
