#include "mixprec/nn/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "mixprec/autograd/node.h"
#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::nn {
namespace {

// Adds the seconds `body` takes to `total`.
template <typename Body>
void timed(double& total, const Body& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::span<float> span_of(Tensor& buffer) {
  return {buffer.data<float>(), static_cast<std::size_t>(buffer.numel())};
}

}  // namespace

void broadcast_parameters(const Communicator& world, const std::vector<Tensor>& params, int root) {
  for (const Tensor& p : params) {
    // Dense (any dim order, channels_last included): its elements are numel() end to end.
    MIXPREC_CHECK(p.is_non_overlapping_and_dense(),
                  "[DataParallel] broadcast needs dense parameters");
    world.broadcast(p.data_ptr(), static_cast<std::size_t>(p.numel()) * p.element_size(), root);
  }
}

uint64_t parameter_checksum(const std::vector<Tensor>& params) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over every byte, 64-bit words at a time
  for (const Tensor& p : params) {
    const Tensor c = p.contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    const std::size_t n = static_cast<std::size_t>(c.numel()) * c.element_size();
    std::size_t k = 0;
    for (; k + 8 <= n; k += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + k, 8);
      hash = (hash ^ word) * 0x100000001b3ULL;
    }
    for (; k < n; ++k) hash = (hash ^ bytes[k]) * 0x100000001b3ULL;
  }
  return hash;
}

bool replicas_agree(const Communicator& world, const std::vector<Tensor>& params) {
  const uint64_t mine = parameter_checksum(params);
  uint64_t root = mine;
  world.broadcast(&root, sizeof root);
  return !world.any(root != mine);
}

DataParallel::DataParallel(const Communicator& world, std::vector<Tensor> params,
                           DataParallelOptions options)
    : world_(world), params_(std::move(params)), options_(options) {
  MIXPREC_CHECK(options.bucket_mb > 0, "[DataParallel] bucket_mb must be > 0, got ",
                options.bucket_mb);
  const auto bucket_elements =
      static_cast<int64_t>(options.bucket_mb * 1024 * 1024 / sizeof(float));
  bucket_of_.resize(params_.size());
  packed_.resize(params_.size());
  // Reverse order: backward finishes the last parameters' gradients first.
  std::vector<std::vector<std::size_t>> groups;
  int64_t filled = bucket_elements;
  for (std::size_t i = params_.size(); i-- > 0;) {
    const Tensor& p = params_[i];
    MIXPREC_CHECK(p.defined() && p.requires_grad() && p.autograd_meta()->grad_fn == nullptr,
                  "[DataParallel] parameter ", i, " is not a leaf that requires grad");
    if (filled + p.numel() > bucket_elements && filled > 0) {
      groups.emplace_back();
      filled = 0;
    }
    groups.back().push_back(i);
    filled += p.numel();
  }
  buckets_.resize(groups.size());
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets_[b];
    int64_t size = 0;
    for (const std::size_t i : groups[b]) {
      bucket.params.push_back(i);
      bucket.offsets.push_back(size);
      bucket_of_[i] = b;
      size += params_[i].numel();
    }
    bucket.buffer = Tensor::zeros({size}, DType::F32);
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    MIXPREC_CHECK(!params_[i].autograd_meta()->post_accumulate_hook,
                  "[DataParallel] parameter ", i, " already has a post-accumulate hook");
    params_[i].autograd_meta()->post_accumulate_hook = [this, i] { on_gradient_ready(i); };
  }
}

DataParallel::~DataParallel() {
  for (Bucket& bucket : buckets_) bucket.request.wait();
  for (const Tensor& p : params_) p.autograd_meta()->post_accumulate_hook = nullptr;
}

void DataParallel::expect_gradients() {
  MIXPREC_CHECK(!expecting_, "[DataParallel] expect_gradients() twice without finish()");
  expecting_ = true;
  next_to_start_ = 0;
  for (Bucket& bucket : buckets_) bucket.ready = 0;
  std::fill(packed_.begin(), packed_.end(), false);
}

void DataParallel::pack(std::size_t param) {
  Bucket& bucket = buckets_[bucket_of_[param]];
  std::size_t slot = 0;
  while (bucket.params[slot] != param) ++slot;
  const Tensor& p = params_[param];
  const Tensor view = bucket.buffer.narrow(0, bucket.offsets[slot], p.numel()).view(p.shape());
  timed(times_.packing, [&] {
    const Tensor g = p.grad();
    if (g.defined())
      view.copy_(g);  // widens a 16-bit gradient into f32
    else
      view.zero_();
  });
  packed_[param] = true;
  ++bucket.ready;
}

void DataParallel::on_gradient_ready(std::size_t param) {
  if (!expecting_ || packed_[param]) return;
  pack(param);
  if (!options_.overlap) return;
  const std::size_t before = next_to_start_;
  start_ready_buckets();
  times_.buckets_in_backward += static_cast<int64_t>(next_to_start_ - before);
  progress();
}

void DataParallel::start(Bucket& bucket) {
  timed(times_.exposed, [&] { bucket.request = world_.start_all_reduce_sum(span_of(bucket.buffer)); });
  ++times_.buckets;
}

void DataParallel::start_ready_buckets() {
  while (next_to_start_ < buckets_.size() &&
         buckets_[next_to_start_].ready == buckets_[next_to_start_].params.size())
    start(buckets_[next_to_start_++]);
}

void DataParallel::progress() {
  // Most MPI libraries move a non-blocking collective's data only inside MPI calls: testing
  // the ones in flight at every finished gradient lets them advance during backward.
  timed(times_.exposed, [&] {
    for (std::size_t b = 0; b < next_to_start_; ++b) buckets_[b].request.test();
  });
}

void DataParallel::finish() {
  MIXPREC_CHECK(expecting_, "[DataParallel] finish() without expect_gradients()");
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!packed_[i]) pack(i);  // no gradient reached it during backward (or overlap is off)
  if (options_.overlap) {
    start_ready_buckets();
    timed(times_.exposed, [&] {
      for (Bucket& bucket : buckets_) bucket.request.wait();
    });
  } else {
    for (Bucket& bucket : buckets_) {
      timed(times_.exposed, [&] { world_.all_reduce_sum(span_of(bucket.buffer)); });
      ++times_.buckets;
    }
  }
  expecting_ = false;
  ++times_.reductions;
  const double factor =
      options_.reduction == GradReduction::Mean ? 1.0 / static_cast<double>(world_.size()) : 1.0;
  NoGrad no_grad;
  timed(times_.packing, [&] {
    for (Bucket& bucket : buckets_) {
      if (factor != 1.0) {
        const auto f = static_cast<float>(factor);
        for (float& x : span_of(bucket.buffer)) x *= f;
      }
      for (std::size_t slot = 0; slot < bucket.params.size(); ++slot) {
        const Tensor& p = params_[bucket.params[slot]];
        const Tensor reduced =
            bucket.buffer.narrow(0, bucket.offsets[slot], p.numel()).view(p.shape());
        // In the parameter's own layout (channels_last convolutions), as gradients are.
        const Tensor grad = Tensor::empty_like(p, DType::F32);
        grad.copy_(reduced);
        p.autograd_meta()->grad = grad;
      }
    }
  });
}

}  // namespace mixprec::nn
