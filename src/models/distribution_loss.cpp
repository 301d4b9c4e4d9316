#include "mixprec/models/distribution_loss.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <utility>
#include <cmath>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/ops/arith.h"
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

// A float's bits as an unsigned key with the float's order (negatives reversed below positives).
uint32_t order_key(float v) {
  const auto u = std::bit_cast<uint32_t>(v);
  return (u & 0x80000000U) != 0 ? ~u : (u | 0x80000000U);
}

float from_order_key(uint32_t k) {
  return std::bit_cast<float>((k & 0x80000000U) != 0 ? (k & 0x7fffffffU) : ~k);
}

// Sorts keys ascending, carrying each key's index along: a stable LSD radix sort, three passes
// of 11 bits, so equal keys keep their positions' order. A comparison sort of the ~4k values of
// one row was most of a training step's time.
class RankSorter {
 public:
  // values[0, n) -> their indices in ascending order of value (ties: lower index first).
  const std::vector<uint32_t>& order(const float* values, int64_t n) {
    keys_.resize(static_cast<std::size_t>(n));
    index_.resize(keys_.size());
    for (int64_t i = 0; i < n; ++i) {
      keys_[static_cast<std::size_t>(i)] = order_key(values[i]);
      index_[static_cast<std::size_t>(i)] = static_cast<uint32_t>(i);
    }
    sort();
    return index_;
  }
  // values[0, n) -> sorted ascending, into out.
  void sorted(const float* values, int64_t n, std::vector<float>& out) {
    order(values, n);
    out.resize(keys_.size());
    for (std::size_t i = 0; i < keys_.size(); ++i) out[i] = from_order_key(keys_[i]);
  }

 private:
  void sort() {
    constexpr int kBits = 11;
    constexpr uint32_t kBuckets = 1U << kBits;
    keys_tmp_.resize(keys_.size());
    index_tmp_.resize(keys_.size());
    for (int shift = 0; shift < 32; shift += kBits) {
      std::array<uint32_t, kBuckets> start{};
      for (const uint32_t k : keys_) ++start[(k >> shift) & (kBuckets - 1)];
      uint32_t sum = 0;
      for (uint32_t& s : start) sum += std::exchange(s, sum);
      for (std::size_t i = 0; i < keys_.size(); ++i) {
        const uint32_t at = start[(keys_[i] >> shift) & (kBuckets - 1)]++;
        keys_tmp_[at] = keys_[i];
        index_tmp_[at] = index_[i];
      }
      keys_.swap(keys_tmp_);
      index_.swap(index_tmp_);
    }
  }
  std::vector<uint32_t> keys_, index_, keys_tmp_, index_tmp_;
};

// projected [B, D, H', W'] and real [B, D, H', W'] (both contiguous f32) -> the target of every
// projected value: the real value of the same rank in its (sample, direction) row. Ties break by
// position, so the target is a pure function of the values.
Tensor rank_matched_targets(const Tensor& projected, const Tensor& real) {
  const int64_t rows = projected.size(0) * projected.size(1);
  const int64_t n = projected.numel() / rows;
  std::vector<float> target(static_cast<std::size_t>(projected.numel()));
  std::vector<float> sorted_real;
  RankSorter sorter;
  for (int64_t r = 0; r < rows; ++r) {
    sorter.sorted(real.data<float>() + r * n, n, sorted_real);
    const std::vector<uint32_t>& order = sorter.order(projected.data<float>() + r * n, n);
    float* t = target.data() + r * n;
    for (std::size_t i = 0; i < order.size(); ++i) t[order[i]] = sorted_real[i];
  }
  return Tensor::from_vector(target, projected.shape());
}

}  // namespace

Tensor sliced_wasserstein_loss(const Tensor& generated, const Tensor& real, Generator& gen,
                               const SlicedWassersteinOptions& options) {
  MIXPREC_CHECK(generated.dim() == 4 && real.shape() == generated.shape(),
                "[sliced_wasserstein_loss] expected generated and real [B, C, H, W] of one shape, "
                "got ", shape_to_string(generated.shape()), " and ", shape_to_string(real.shape()));
  const int64_t widest =
      options.dilations.empty()
          ? 0
          : (options.patch - 1) * *std::max_element(options.dilations.begin(),
                                                     options.dilations.end()) + 1;
  const bool valid =
      options.directions >= 1 && options.colour_directions >= 0 &&
      options.colour_directions <= options.directions && options.patch >= 1 &&
      options.patch % 2 == 1 && !options.dilations.empty() &&
      std::all_of(options.dilations.begin(), options.dilations.end(),
                  [](int64_t d) { return d >= 1; }) &&
      generated.size(2) >= widest && generated.size(3) >= widest;
  MIXPREC_CHECK(valid, "[sliced_wasserstein_loss] invalid options: ", options.directions,
                " directions, ", options.colour_directions, " colour directions, patch ",
                options.patch, ", ", options.dilations.size(), " dilations, for frames ",
                shape_to_string(generated.shape()));
  const amp::Autocast full_precision(DType::F32, /*enabled=*/false);
  const Tensor fake = generated.to(DType::F32);
  const Tensor truth = real.detach().to(DType::F32);
  Tensor total;
  for (const int64_t dilation : options.dilations) {
    const Tensor directions = random_directions(generated.size(1), options, gen);
    const Conv2dParams taps{.dilation = dilation};
    const Tensor projected = conv2d(fake, directions, Tensor(), taps);
    Tensor real_projected;
    {
      NoGrad no_grad;
      real_projected = conv2d(truth, directions, Tensor(), taps).contiguous();
    }
    const Tensor term =
        mse_loss(projected, rank_matched_targets(projected.detach().contiguous(), real_projected));
    total = total.defined() ? add(total, term) : term;
  }
  return div(total, static_cast<double>(options.dilations.size()));
}

}  // namespace mixprec::models
