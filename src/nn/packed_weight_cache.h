#pragma once
// A layer's weights packed once for inference (nn::Conv2d, nn::Linear): the op then skips its
// per-call packing. Internal to src/nn.
//
// The packing is remade whenever it could differ from what the op would pack from the weight
// as it is now, so a cached forward is bit-identical to an uncached one. It depends on:
//   - which tensor the weight is: Module::to and load paths may replace it. The storage is
//     held weakly, so a replaced weight's memory is not kept alive by the cache; the control
//     block the weak pointer keeps cannot be reused by another storage, so identities are
//     never confused;
//   - its contents: the storage's version, bumped by copy_, fill_, zero_, optimizer steps;
//   - the dtypes the op runs in: the weight's and x's, and autocast's state, which may cast
//     both;
//   - the kernel level, and the op's own process-wide choices that change the packing.
// One entry per layer: a new key replaces the old packing (released before the new one is
// made), so the cache never grows and holds at most one copy of the weights.
#include <cstdint>
#include <memory>
#include <mutex>

#include "mixprec/core/cpu_features.h"
#include "mixprec/core/tensor.h"
#include "mixprec/mode/autocast_policy.h"

namespace mixprec::nn::detail {

// While alive, layers on this thread run on their weights as they are, without packing them
// for inference: activation checkpointing's no-grad forward, whose weights an optimizer step
// changes before the next one. (A graph capture freezes a packing into its kernels; a training
// step's graph must read the weights.)
class ScopedUnpackedWeights {
 public:
  ScopedUnpackedWeights();
  ~ScopedUnpackedWeights();
  ScopedUnpackedWeights(const ScopedUnpackedWeights&) = delete;
  ScopedUnpackedWeights& operator=(const ScopedUnpackedWeights&) = delete;

 private:
  bool previous_;
};
bool unpacked_weights();  // whether a ScopedUnpackedWeights is alive on this thread

struct PackKey {
  std::weak_ptr<Storage> storage;
  int64_t offset = 0;
  Shape shape;
  Strides strides;
  uint64_t version = 0;
  DType weight_dtype = DType::F32, x_dtype = DType::F32;
  bool autocast = false;
  DType autocast_dtype = DType::F32;
  IsaLevel level = IsaLevel::Scalar;
  int op_mode = 0;  // the op's own setting that changes its packing

  bool matches(const PackKey& other) const;
};

// The key of packing `weight` for inputs of dtype x_dtype (before autocast) now.
PackKey pack_key(const Tensor& weight, DType x_dtype, int op_mode);

// The weight and the input dtype as `op` would see them under the autocast state in force:
// what a layer packs for. The weight is detached so autocast casts a temporary (its cast cache
// keeps only parameters), not a second long-lived copy next to the packing; x's dtype comes
// from an empty stand-in.
struct OperandsAsOpSees {
  Tensor weight;
  DType x_dtype;
};
OperandsAsOpSees operands_as_op_sees(amp::AutocastOp op, const Tensor& weight, DType x_dtype);

template <typename Packed>
class PackedWeightCache {
 public:
  // The packing for `key`: the cached one, or make()'s, which replaces it. Callers keep the
  // returned pointer for their call, so a concurrent replacement cannot free it under them.
  template <typename Make>
  std::shared_ptr<const Packed> get(const PackKey& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (packed_ != nullptr && key_.matches(key)) return packed_;
      packed_.reset();  // stale: give its memory back before packing again
    }
    auto fresh = std::make_shared<const Packed>(make());
    std::lock_guard<std::mutex> lock(mutex_);
    key_ = key;
    packed_ = fresh;
    return fresh;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    packed_.reset();
  }

  // Bytes of the packing held (0 when none).
  std::size_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return packed_ != nullptr ? packed_->bytes() : 0;
  }

 private:
  mutable std::mutex mutex_;
  PackKey key_;
  std::shared_ptr<const Packed> packed_;
};

}  // namespace mixprec::nn::detail
