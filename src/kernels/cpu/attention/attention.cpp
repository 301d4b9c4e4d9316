// Flash-style attention driver. Per (batch, head): K^T and V are packed once (O(Sk * D)), then
// for each block of kBr queries the keys are visited in blocks of kBc:
//   S = scale * Q_blk K_blk^T (+ mask)          GEMM on a slice of packed K^T, f32 out
//   online softmax update of S -> P, m, l, O    attention_block.h, per ISA
//   O += P V_blk                                GEMM on a slice of packed V, f32 accumulate
// and finally out = O / l. Work is split over (batch, head) pairs, or over query blocks when
// there are fewer pairs than threads.
#include "mixprec/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "attention_internal.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels {
namespace {

using attention_detail::BlockUpdateFn;
using attention_detail::matrix_at;

// Queries per block: a multiple of the AVX-512 tile height (14). Causal blocks compute the
// scores of their whole key range, the hidden triangle of the diagonal block included, so
// smaller blocks waste less: 56 runs the GPT's causal heads (T 256, d 64) 7-8% faster than
// 112, and non-causal T 256 1% slower (Zen 5, session 21).
constexpr int64_t kBr = 56;
constexpr int64_t kBc = 512;       // keys per block: a multiple of every panel width, and even
constexpr int64_t kKeyAlign = 32;  // AMX takes a bf16 product whose depth is a multiple of 32

const IsaTable<BlockUpdateFn> kBlockUpdate{{attention_detail::block_update_scalar,
                                            attention_detail::block_update_avx2,
                                            attention_detail::block_update_avx512, nullptr}};

const IsaTable<attention_detail::AttendRowsFn> kAttendRows{
    {attention_detail::attend_rows_scalar, attention_detail::attend_rows_avx2,
     attention_detail::attend_rows_avx512, nullptr}};

// Up to this many queries per head read K and V in place (attend_rows): packing them costs
// O(Sk * D) per head, as much as one query's products.
constexpr int64_t kFewQueries = 2;

bool is_attention_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Per-thread block buffers, reused across calls.
struct Scratch {
  Allocation scores, probs, acc, stats;
};
Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

struct HeadProblem {
  MatrixView q, k, v;      // [Sq, D], [Sk, D], [Sk, Dv]
  const PackedMatrix* kt;  // packed K^T [D, Sk]
  const PackedMatrix* vp;  // packed V [Sk, Dv]
  DType p_dtype;
  float scale;
  bool causal;
  const char* mask;  // [Sq, Sk] rows mask_ld apart, or null
  DType mask_dtype;
  int64_t mask_ld;
  char* out;  // [Sq, Dv] rows out_ld apart
  DType out_dtype;
  int64_t out_ld;
  float* lse;  // [Sq] stride lse_stride, or null
  int64_t lse_stride;
};

void run_query_block(const HeadProblem& hp, int64_t q0) {
  const int64_t rows = std::min(kBr, hp.q.rows - q0);
  const int64_t sk = hp.k.rows, dv = hp.v.cols;
  Scratch& sc = thread_scratch();
  float* s = static_cast<float*>(sc.scores.reserve(kBr * kBc * sizeof(float)));  // [kBr, kBc]
  void* p = sc.probs.reserve(kBr * kBc * dtype_size(hp.p_dtype));                // [kBr, kBc]
  float* o = static_cast<float*>(
      sc.acc.reserve(static_cast<std::size_t>(kBr * dv) * sizeof(float)));  // [kBr, dv]
  float* stats = static_cast<float*>(sc.stats.reserve(2 * kBr * sizeof(float)));
  float* m = stats;        // [kBr] running max
  float* l = stats + kBr;  // [kBr] running sum
  std::fill(m, m + rows, -INFINITY);
  std::fill(l, l + rows, 0.0f);
  std::fill(o, o + rows * dv, 0.0f);
  BlockUpdateFn* update = kBlockUpdate();

  const std::size_t q_elem = dtype_size(hp.q.dtype);
  MatrixView q_blk = hp.q;
  q_blk.data =
      static_cast<const char*>(hp.q.data) + static_cast<std::size_t>(q0 * hp.q.row_stride) * q_elem;
  q_blk.rows = rows;
  // Causal: keys past the block's last query are never visible. The key range is rounded up to
  // a multiple of 32 (the extra keys are hidden) so that P V, whose depth it is, runs on AMX.
  const int64_t k_end =
      hp.causal ? std::min(sk, (q0 + rows + kKeyAlign - 1) / kKeyAlign * kKeyAlign) : sk;

  for (int64_t k0 = 0; k0 < k_end; k0 += kBc) {
    const int64_t cols = std::min(kBc, k_end - k0);
    const GemmEpilogue score_ep =
        attention_detail::score_epilogue(hp.scale, hp.mask, hp.mask_dtype, hp.mask_ld, q0, k0);
    gemm_prepacked(q_blk, *hp.kt, MutableMatrixView::row_major(s, DType::F32, rows, cols, kBc),
                   score_ep, {0, -1, k0, k0 + cols});
    const int64_t diagonal = hp.causal ? q0 - k0 + 1 : attention_detail::kAllVisible;
    update(s, kBc, static_cast<int>(rows), static_cast<int>(cols), diagonal, m, l, p, hp.p_dtype,
           kBc, o, dv, static_cast<int>(dv));
    GemmEpilogue accumulate;
    accumulate.beta = 1.0f;
    gemm_prepacked(MatrixView::row_major(p, hp.p_dtype, rows, cols, kBc), *hp.vp,
                   MutableMatrixView::row_major(o, DType::F32, rows, dv, dv), accumulate,
                   {k0, k0 + cols, 0, -1});
  }

  // out = O / l; a row that saw no key (l = 0) is 0.
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* orow = o + r * dv;
    for (int64_t j = 0; j < dv; ++j) orow[j] *= inv;
    if (hp.lse != nullptr)
      hp.lse[(q0 + r) * hp.lse_stride] = l[r] > 0.0f ? m[r] + std::log(l[r]) : -INFINITY;
  }
  convert_rows(o, DType::F32, dv,
               hp.out + static_cast<std::size_t>(q0 * hp.out_ld) * dtype_size(hp.out_dtype),
               hp.out_dtype, hp.out_ld, rows, dv);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const AttentionOptions& opt, const Tensor* lse) {
  const char* op = "[scaled_dot_product_attention]";
  MIXPREC_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && out.dim() == 4, op,
                " expected 4-D q, k, v, out [batch, heads, seq, dim], got q ",
                shape_to_string(q.shape()), ", k ", shape_to_string(k.shape()), ", v ",
                shape_to_string(v.shape()), ", out ", shape_to_string(out.shape()));
  const int64_t b = q.size(0), h = q.size(1), sq = q.size(2), d = q.size(3), sk = k.size(2),
                dv = v.size(3);
  MIXPREC_CHECK(k.size(0) == b && k.size(1) == h && k.size(3) == d && v.size(0) == b &&
                    v.size(1) == h && v.size(2) == sk,
                op, " k ", shape_to_string(k.shape()), " and v ", shape_to_string(v.shape()),
                " do not match q ", shape_to_string(q.shape()), " (expected k [", b, ", ", h,
                ", Sk, ", d, "] and v [", b, ", ", h, ", Sk, Dv])");
  MIXPREC_CHECK(out.shape() == Shape({b, h, sq, dv}), op, " out has shape ",
                shape_to_string(out.shape()), ", expected ", shape_to_string({b, h, sq, dv}));
  const bool f64 = q.dtype() == DType::F64;  // then all four are
  for (const Tensor* t : {&q, &k, &v, &out})
    MIXPREC_CHECK(f64 ? t->dtype() == DType::F64 : is_attention_float(t->dtype()), op,
                  " expected f32, bf16 or f16 tensors (or f64 throughout), got ",
                  dtype_name(t->dtype()));
  if (opt.mask != nullptr)
    MIXPREC_CHECK(is_attention_float(opt.mask->dtype()) || opt.mask->dtype() == DType::F64, op,
                  " mask must be a float tensor, got ", dtype_name(opt.mask->dtype()));
  if (lse != nullptr)
    MIXPREC_CHECK(lse->dtype() == DType::F32 && lse->shape() == Shape({b, h, sq}), op,
                  " logsumexp must be f32 ", shape_to_string({b, h, sq}), ", got ",
                  dtype_name(lse->dtype()), " ", shape_to_string(lse->shape()));
}

}  // namespace

void scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const AttentionOptions& opt,
                                  const Tensor* logsumexp) {
  check_inputs(q, k, v, out, opt, logsumexp);
  const int64_t batch = q.size(0), heads = q.size(1), sq = q.size(2), d = q.size(3);
  const float scale = opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(d));
  Tensor mask;
  if (opt.mask != nullptr) mask = opt.mask->expand({batch, heads, sq, k.size(2)});
  if (q.dtype() == DType::F64)
    return attention_detail::forward_f64(q, k, v, mask, opt.causal, scale, out, logsumexp);
  if (out.numel() == 0) return;
  if (mask.defined() && mask.stride(3) != 1 && k.size(2) > 1) mask = mask.contiguous();
  const int64_t sk = k.size(2), dv = v.size(3);
  const bool rows_contiguous =
      q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && out.stride(3) == 1;
  if (sq <= kFewQueries && rows_contiguous && d <= attention_detail::kAttendRowsMaxDim &&
      dv <= attention_detail::kAttendRowsMaxDim) {
    attention_detail::AttendRowsFn* attend = kAttendRows();
    const std::size_t score_bytes = static_cast<std::size_t>(std::max(sk, opt.key_capacity)) * 4;
    const bool masked = mask.defined(), with_lse = logsumexp != nullptr;
    const attention_detail::HeadMatrices qs(q), ks(k), vs(v), outs(out);
    const std::optional<attention_detail::HeadMatrices> masks =
        masked ? std::optional(attention_detail::HeadMatrices(mask)) : std::nullopt;
    parallel_for(0, batch * heads, 1, [&](int64_t lo, int64_t hi) {
      thread_local Allocation scores;
      float* s = static_cast<float*>(scores.reserve(score_bytes));
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / heads, h = bh % heads;
        attend({.q = qs.at(b, h),
                .k = ks.at(b, h),
                .v = vs.at(b, h),
                .out = outs.mutable_at(b, h),
                .scale = scale,
                .diagonal = opt.causal ? 1 : attention_detail::kAllVisible,
                .mask = masked ? static_cast<const char*>(masks->at(b, h).data) : nullptr,
                .mask_dtype = masked ? mask.dtype() : DType::F32,
                .mask_ld = masked ? mask.stride(2) : 0,
                .lse = with_lse ? logsumexp->data<float>() + b * logsumexp->stride(0) +
                                      h * logsumexp->stride(1)
                                : nullptr,
                .lse_stride = with_lse ? logsumexp->stride(2) : 0,
                .scores = s});
      }
    });
    return;
  }
  // Probabilities take V's dtype when it is bf16 (so P V runs on vdpbf16ps); otherwise f32.
  const DType p_dtype = v.dtype() == DType::BF16 ? DType::BF16 : DType::F32;
  const int64_t q_blocks = (sq + kBr - 1) / kBr;

  auto head_problem = [&](int64_t b, int64_t h, const PackedMatrix& kt, const PackedMatrix& vp) {
    HeadProblem hp{
        matrix_at(q, b, h),
        matrix_at(k, b, h),
        matrix_at(v, b, h),
        &kt,
        &vp,
        p_dtype,
        scale,
        opt.causal,
        nullptr,
        DType::F32,
        0,
        static_cast<char*>(out.data_ptr()) +
            static_cast<std::size_t>(b * out.stride(0) + h * out.stride(1)) * out.element_size(),
        out.dtype(),
        out.stride(2),
        nullptr,
        0};
    MIXPREC_CHECK(out.stride(3) == 1 || out.size(3) == 1,
                  "[scaled_dot_product_attention] out's last dim must be contiguous");
    if (mask.defined()) {
      hp.mask =
          static_cast<const char*>(mask.data_ptr()) +
          static_cast<std::size_t>(b * mask.stride(0) + h * mask.stride(1)) * mask.element_size();
      hp.mask_dtype = mask.dtype();
      hp.mask_ld = mask.stride(2);
    }
    if (logsumexp != nullptr) {
      hp.lse = logsumexp->data<float>() + b * logsumexp->stride(0) + h * logsumexp->stride(1);
      hp.lse_stride = logsumexp->stride(2);
    }
    return hp;
  };
  // Each thread packs into its own panels, kept across calls (no allocation once warm).
  auto pack_head = [&](int64_t b, int64_t h, PackedMatrix& kt, PackedMatrix& vp) {
    if (opt.key_capacity > k.size(2)) {
      reserve_packed_b(kt, d, opt.key_capacity, k.dtype(), q.dtype());
      reserve_packed_b(vp, opt.key_capacity, v.size(3), v.dtype(), p_dtype);
    }
    repack_b(kt, matrix_at(k, b, h).transposed(), q.dtype());
    repack_b(vp, matrix_at(v, b, h), p_dtype);
  };
  auto thread_packs = []() -> std::pair<PackedMatrix, PackedMatrix>& {
    thread_local std::pair<PackedMatrix, PackedMatrix> packs;
    return packs;
  };

  const int threads = num_threads();
  if (batch * heads >= threads || q_blocks == 1) {
    parallel_for(0, batch * heads, 1, [&](int64_t lo, int64_t hi) {
      auto& [kt, vp] = thread_packs();
      for (int64_t bh = lo; bh < hi; ++bh) {
        pack_head(bh / heads, bh % heads, kt, vp);
        const HeadProblem hp = head_problem(bh / heads, bh % heads, kt, vp);
        for (int64_t qb = 0; qb < q_blocks; ++qb) run_query_block(hp, qb * kBr);
      }
    });
  } else {
    auto& [kt, vp] = thread_packs();
    for (int64_t bh = 0; bh < batch * heads; ++bh) {
      pack_head(bh / heads, bh % heads, kt, vp);
      const HeadProblem hp = head_problem(bh / heads, bh % heads, kt, vp);
      parallel_for(0, q_blocks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t qb = lo; qb < hi; ++qb) run_query_block(hp, qb * kBr);
      });
    }
  }
}

}  // namespace mixprec::kernels
