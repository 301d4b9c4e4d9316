#include "packed_weight_cache.h"

#include <array>

#include "mixprec/mode/autocast.h"

namespace mixprec::nn::detail {

namespace {
thread_local bool tl_unpacked = false;
}

ScopedUnpackedWeights::ScopedUnpackedWeights() : previous_(tl_unpacked) { tl_unpacked = true; }
ScopedUnpackedWeights::~ScopedUnpackedWeights() { tl_unpacked = previous_; }
bool unpacked_weights() { return tl_unpacked; }

bool PackKey::matches(const PackKey& other) const {
  const bool same_storage = !storage.owner_before(other.storage) &&
                            !other.storage.owner_before(storage) && !storage.expired();
  return same_storage && offset == other.offset && shape == other.shape &&
         strides == other.strides && version == other.version &&
         weight_dtype == other.weight_dtype && x_dtype == other.x_dtype &&
         autocast == other.autocast && (!autocast || autocast_dtype == other.autocast_dtype) &&
         level == other.level && op_mode == other.op_mode;
}

PackKey pack_key(const Tensor& weight, DType x_dtype, int op_mode) {
  PackKey k;
  k.storage = weight.storage();
  k.offset = weight.storage_offset();
  k.shape = weight.shape();
  k.strides = weight.strides();
  k.version = weight.storage()->version();
  k.weight_dtype = weight.dtype();
  k.x_dtype = x_dtype;
  k.autocast = amp::autocast_enabled();
  k.autocast_dtype = amp::autocast_dtype();
  k.level = active_isa();
  k.op_mode = op_mode;
  return k;
}

OperandsAsOpSees operands_as_op_sees(amp::AutocastOp op, const Tensor& weight, DType x_dtype) {
  std::array<Tensor, 2> operands{Tensor::empty({0}, x_dtype), weight.detach()};
  amp::apply_autocast(op, operands);
  return {operands[1], operands[0].dtype()};
}

}  // namespace mixprec::nn::detail
