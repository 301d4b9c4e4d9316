// convnext_mlp (mixprec/kernels/convnext.h): checks, parameters widened to f32, the two passes
// over blocks of pixels on the thread pool, and GRN folded into the projection between them.
#include "mixprec/kernels/convnext.h"

#include <cmath>
#include <vector>

#include "convnext_impl.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "../simd/simd_scalar.h"

namespace mixprec::kernels {
namespace convnext_detail {

void expand_block_scalar(const ExpandBlock& a) { expand_block<simd::Scalar>(a); }
void project_block_scalar(const ProjectBlock& a) { project_block<simd::Scalar>(a); }

}  // namespace convnext_detail

namespace {

// Pixels per block: GRN's sums of squares are summed per block, then the blocks in order, so
// the result is the same on any number of threads.
using convnext_detail::kBlock;

std::vector<float> f32_values(const Tensor& t, int64_t n, float fill, const char* name) {
  if (!t.defined()) return std::vector<float>(static_cast<std::size_t>(n), fill);
  MIXPREC_CHECK(t.numel() == n, "[convnext_mlp] ", name, " has ", t.numel(), " values, expected ",
                n);
  const Tensor f = t.to(DType::F32).contiguous();
  return {f.data<float>(), f.data<float>() + n};
}

bool is_storage_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

}  // namespace

void convnext_mlp(const Tensor& x, const Tensor& residual, const ConvNextMlpWeights& w,
                  const Tensor& out) {
  MIXPREC_CHECK(x.dim() == 4 && residual.shape() == x.shape() && out.shape() == x.shape(),
                "[convnext_mlp] expected x, residual and out of one shape [N, H, W, C], got ",
                shape_to_string(x.shape()), ", ", shape_to_string(residual.shape()), ", ",
                shape_to_string(out.shape()));
  MIXPREC_CHECK(is_storage_float(x.dtype()) && residual.dtype() == x.dtype() &&
                    out.dtype() == x.dtype(),
                "[convnext_mlp] x, residual and out must share one dtype of f32, bf16, f16; got ",
                dtype_name(x.dtype()), ", ", dtype_name(residual.dtype()), ", ",
                dtype_name(out.dtype()));
  MIXPREC_CHECK(x.is_contiguous() && residual.is_contiguous() && out.is_contiguous(),
                "[convnext_mlp] x, residual and out must be contiguous [N, H, W, C]");
  MIXPREC_CHECK(out.data_ptr() != x.data_ptr(), "[convnext_mlp] out must not alias x");
  const int64_t n = x.size(0), pixels = x.size(1) * x.size(2), c = x.size(3);
  MIXPREC_CHECK(w.expand_weight.dim() == 2 && w.expand_weight.size(1) == c &&
                    w.project_weight.dim() == 2 &&
                    w.project_weight.shape() == Shape({c, w.expand_weight.size(0)}),
                "[convnext_mlp] expected expand [rC, ", c, "] and project [", c,
                ", rC], got ", shape_to_string(w.expand_weight.shape()), " and ",
                shape_to_string(w.project_weight.shape()));
  const int64_t hd = w.expand_weight.size(0);
  if (x.numel() == 0) return;

  // The parameters in f32.
  const std::vector<float> norm_weight = f32_values(w.norm_weight, c, 1.0F, "norm weight");
  const std::vector<float> norm_bias = f32_values(w.norm_bias, c, 0.0F, "norm bias");
  const std::vector<float> expand = f32_values(w.expand_weight, hd * c, 0.0F, "expand weight");
  const std::vector<float> expand_bias = f32_values(w.expand_bias, hd, 0.0F, "expand bias");
  const std::vector<float> gamma = f32_values(w.grn_gamma, hd, 0.0F, "GRN gamma");
  const std::vector<float> beta = f32_values(w.grn_beta, hd, 0.0F, "GRN beta");
  const std::vector<float> project = f32_values(w.project_weight, c * hd, 0.0F, "project weight");
  const std::vector<float> project_bias = f32_values(w.project_bias, c, 0.0F, "project bias");

  static constexpr IsaTable<convnext_detail::ExpandBlockFn> kExpand{
      {convnext_detail::expand_block_scalar, convnext_detail::expand_block_avx2,
       convnext_detail::expand_block_avx512}};
  static constexpr IsaTable<convnext_detail::ProjectBlockFn> kProject{
      {convnext_detail::project_block_scalar, convnext_detail::project_block_avx2,
       convnext_detail::project_block_avx512}};
  convnext_detail::ExpandBlockFn* expand_fn = kExpand();
  convnext_detail::ProjectBlockFn* project_fn = kProject();

  const DType dt = x.dtype();
  const std::size_t es = dtype_size(dt);
  const int64_t blocks = (pixels + kBlock - 1) / kBlock;
  const Tensor hidden = Tensor::empty({n * blocks, hd, kBlock}, dt);  // the blocks' own layout
  const std::size_t hidden_block = static_cast<std::size_t>(hd * kBlock) * es;
  std::vector<float> block_sums(static_cast<std::size_t>(n * blocks * hd));
  auto block_pixels = [&](int64_t b) { return std::min(kBlock, pixels - b * kBlock); };

  parallel_for(0, n * blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<std::size_t>(2 * c * kBlock));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t sample = t / blocks, p0 = sample * pixels + (t % blocks) * kBlock;
      expand_fn({static_cast<const char*>(x.data_ptr()) + static_cast<std::size_t>(p0 * c) * es,
                 dt, block_pixels(t % blocks), c, hd, norm_weight.data(), norm_bias.data(),
                 static_cast<float>(w.norm_eps), expand.data(), expand_bias.data(),
                 static_cast<char*>(hidden.data_ptr()) + static_cast<std::size_t>(t) * hidden_block,
                 block_sums.data() + t * hd, scratch.data()});
    }
  });

  // GRN per sample, in f64: G_j = ||h[:, j]||, R_j = G_j / (mean G + eps), f_j = 1 + gamma_j R_j;
  // project(h * f + beta) = (W diag f) h + (W beta + b). The 1e-30 is the unfused layer's floor.
  std::vector<float> folded(static_cast<std::size_t>(n * c * hd));  // [N][C][rC]
  std::vector<float> folded_bias(static_cast<std::size_t>(n * c));  // [N][C]
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> norm(static_cast<std::size_t>(hd), 0.0);
    double mean_norm = 0;
    for (int64_t j = 0; j < hd; ++j) {
      double sq = 0;
      for (int64_t b = 0; b < blocks; ++b) sq += block_sums[static_cast<std::size_t>((s * blocks + b) * hd + j)];
      norm[static_cast<std::size_t>(j)] = std::sqrt(sq + 1e-30);
      mean_norm += norm[static_cast<std::size_t>(j)] / static_cast<double>(hd);
    }
    for (int64_t k = 0; k < c; ++k) {
      double b = project_bias[static_cast<std::size_t>(k)];
      for (int64_t j = 0; j < hd; ++j) {
        const double wkj = project[static_cast<std::size_t>(k * hd + j)];
        const double f = 1.0 + gamma[static_cast<std::size_t>(j)] *
                                   norm[static_cast<std::size_t>(j)] / (mean_norm + w.grn_eps);
        folded[static_cast<std::size_t>((s * c + k) * hd + j)] = static_cast<float>(wkj * f);
        b += wkj * beta[static_cast<std::size_t>(j)];
      }
      folded_bias[static_cast<std::size_t>(s * c + k)] = static_cast<float>(b);
    }
  }

  parallel_for(0, n * blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(
        static_cast<std::size_t>(2 * c * kBlock + hd * convnext_detail::kMaxLanes));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t sample = t / blocks, p0 = sample * pixels + (t % blocks) * kBlock;
      const std::size_t at = static_cast<std::size_t>(p0 * c) * es;
      project_fn({static_cast<const char*>(hidden.data_ptr()) + static_cast<std::size_t>(t) * hidden_block,
                  static_cast<const char*>(residual.data_ptr()) + at,
                  static_cast<char*>(out.data_ptr()) + at, dt, block_pixels(t % blocks), c, hd,
                  folded.data() + sample * c * hd, folded_bias.data() + sample * c,
                  scratch.data()});
    }
  });
}

}  // namespace mixprec::kernels
