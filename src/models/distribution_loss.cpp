#include "mixprec/models/distribution_loss.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/conv.h"
#include "mixprec/ops/functional.h"

namespace mixprec::models {

namespace {

// [D, C, p, p] f32: D random unit directions in patch space. The first `colour` touch only the
// centre pixel (a direction in colour space), the others every pixel of the patch.
Tensor random_directions(int64_t channels, const SlicedWassersteinOptions& o, Generator& gen) {
  const int64_t taps = o.patch * o.patch, size = channels * taps, centre = taps / 2;
  std::vector<float> w(static_cast<std::size_t>(o.directions * size), 0.0f);
  for (int64_t d = 0; d < o.directions; ++d) {
    float* row = w.data() + d * size;
    const bool colour = d < o.colour_directions;
    double norm = 0;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        if (colour && t != centre) continue;
        const float v = gen.normal();
        row[c * taps + t] = v;
        norm += static_cast<double>(v) * v;
      }
    const auto scale = static_cast<float>(1.0 / std::sqrt(std::max(norm, 1e-30)));
    for (int64_t i = 0; i < size; ++i) row[i] *= scale;
  }
  return Tensor::from_vector(w, {o.directions, channels, o.patch, o.patch});
}

// projected [B, D, H', W'] and real [B, D, H', W'] (both contiguous f32) -> the target of every
// projected value: the real value of the same rank in its (sample, direction) row. Ties break by
// position, so the target is a pure function of the values.
Tensor rank_matched_targets(const Tensor& projected, const Tensor& real) {
  const int64_t rows = projected.size(0) * projected.size(1);
  const int64_t n = projected.numel() / rows;
  std::vector<float> target(static_cast<std::size_t>(projected.numel()));
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::vector<float> sorted_real(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = projected.data<float>() + r * n;
    const float* q = real.data<float>() + r * n;
    std::iota(order.begin(), order.end(), int64_t{0});
    std::sort(order.begin(), order.end(),
              [p](int64_t a, int64_t b) { return p[a] < p[b] || (p[a] == p[b] && a < b); });
    std::copy(q, q + n, sorted_real.begin());
    std::sort(sorted_real.begin(), sorted_real.end());
    float* t = target.data() + r * n;
    for (int64_t i = 0; i < n; ++i) t[order[static_cast<std::size_t>(i)]] = sorted_real[static_cast<std::size_t>(i)];
  }
  return Tensor::from_vector(target, projected.shape());
}

}  // namespace

Tensor sliced_wasserstein_loss(const Tensor& generated, const Tensor& real, Generator& gen,
                               const SlicedWassersteinOptions& options) {
  MIXPREC_CHECK(generated.dim() == 4 && real.shape() == generated.shape(),
                "[sliced_wasserstein_loss] expected generated and real [B, C, H, W] of one shape, "
                "got ", shape_to_string(generated.shape()), " and ", shape_to_string(real.shape()));
  MIXPREC_CHECK(options.directions >= 1 && options.colour_directions >= 0 &&
                    options.colour_directions <= options.directions && options.patch >= 1 &&
                    options.patch % 2 == 1 && generated.size(2) >= options.patch &&
                    generated.size(3) >= options.patch,
                "[sliced_wasserstein_loss] invalid options: ", options.directions, " directions, ",
                options.colour_directions, " colour directions, patch ", options.patch,
                " for frames ", shape_to_string(generated.shape()));
  const amp::Autocast full_precision(DType::F32, /*enabled=*/false);
  const Tensor directions = random_directions(generated.size(1), options, gen);
  const Tensor projected = conv2d(generated.to(DType::F32), directions);
  Tensor real_projected;
  {
    NoGrad no_grad;
    real_projected = conv2d(real.detach().to(DType::F32), directions).contiguous();
  }
  const Tensor target =
      rank_matched_targets(projected.detach().contiguous(), real_projected);
  return mse_loss(projected, target);
}

}  // namespace mixprec::models
