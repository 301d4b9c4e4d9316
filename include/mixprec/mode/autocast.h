#pragma once
// Autocast (PyTorch's torch.autocast for CPU): inside an amp::Autocast region every op front-end
// casts its inputs as the policy table (mode/autocast_policy.h) says, so a model written in f32
// runs its matrix products in bf16/f16 and its sensitive ops in f32 without a change to its
// code. Outside a region nothing is cast, ever.
//
//   {
//     amp::Autocast on(DType::BF16);
//     loss = cross_entropy(model(x), y);   // linear/conv/attention in bf16, the loss in f32
//     { amp::Autocast off(DType::BF16, false); ... }  // switched off inside
//   }
//   loss.backward();                       // runs in the dtypes the forward used
//
// The state is per thread. Guards nest: an inner guard may switch autocast off or change the
// dtype, and the previous state comes back when it dies. Backward passes run with autocast off
// (the engine switches it off), so gradients keep the dtypes their forward chose.
//
// Weight-cast cache: casting a parameter (a leaf that requires grad) is done once per dtype for
// the life of the outermost guard and reused by every later use, as in PyTorch, so a weight
// used by several ops or several forwards is converted once. An entry is dropped and remade
// when it would be wrong: the weight was written in place since (its storage's version moved),
// or the cast was made without gradient history (under NoGrad) and is now needed with it.
// Views of a weight and other non-leaf tensors are cast at each use and never cached, so the
// cache cannot grow with repeated forwards.
//
// Autocast is a thread-local mode like grad mode, so it lives in the mode layer, below
// autograd and ops, which both consult it (docs/ARCHITECTURE.md); its namespace stays amp::, as
// users spell it. GradScaler and PrecisionConfig, which build on optim, are in amp/.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>

#include "mixprec/core/dtype.h"
#include "mixprec/core/tensor.h"
#include "mixprec/mode/autocast_policy.h"

namespace mixprec::amp {

class Autocast {
 public:
  // dtype must be BF16 or F16 (F32 is allowed only with enabled = false).
  explicit Autocast(DType dtype = DType::BF16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool previous_enabled_;
  DType previous_dtype_;
};

bool autocast_enabled();  // on this thread
DType autocast_dtype();   // the dtype Lower ops run in (meaningful while enabled)

// What autocast did on this thread since the last reset: conversions it made (cached or not),
// uses served from the weight-cast cache, and the cache's current size.
struct AutocastStats {
  int64_t casts = 0;
  int64_t cache_hits = 0;
  std::size_t cache_entries = 0;
};
AutocastStats autocast_stats();
void reset_autocast_stats();  // counters only; the cache belongs to the outermost guard

// Casts `inputs` in place as `op`'s policy says; a no-op when autocast is off. Undefined
// tensors (an absent bias) stay undefined.
void apply_autocast(AutocastOp op, std::span<Tensor> inputs);

// The inputs of one op call as the op must see them. With autocast off (the common case) it
// only points at the caller's tensors: no tensor is copied on an op's hot path. Bind it with
// structured bindings, which keep it alive for the op's body:
//   const auto [x, w, b] = amp::autocast_args(AutocastOp::Linear, x_in, w_in, b_in);
template <std::size_t N>
class AutocastArgs {
 public:
  AutocastArgs(AutocastOp op, std::array<const Tensor*, N> inputs) : inputs_(inputs) {
    if (!autocast_enabled()) return;
    for (std::size_t i = 0; i < N; ++i) cast_[i] = *inputs_[i];
    apply_autocast(op, cast_);
    cast_used_ = true;
  }
  AutocastArgs(const AutocastArgs&) = delete;
  AutocastArgs& operator=(const AutocastArgs&) = delete;

  template <std::size_t I>
  const Tensor& get() const {
    return cast_used_ ? cast_[I] : *inputs_[I];
  }

 private:
  std::array<const Tensor*, N> inputs_;
  std::array<Tensor, N> cast_;  // filled only while autocast is on
  bool cast_used_ = false;
};

template <typename... Ts>
AutocastArgs<sizeof...(Ts)> autocast_args(AutocastOp op, const Ts&... inputs) {
  return AutocastArgs<sizeof...(Ts)>(op, {&inputs...});
}

}  // namespace mixprec::amp

template <std::size_t N>
struct std::tuple_size<mixprec::amp::AutocastArgs<N>> : std::integral_constant<std::size_t, N> {};
template <std::size_t I, std::size_t N>
struct std::tuple_element<I, mixprec::amp::AutocastArgs<N>> {
  using type = const mixprec::Tensor&;
};
