#include "mixprec/mode/autocast.h"

#include <unordered_map>

#include "mixprec/core/error.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::amp {
namespace {

// One cached cast of a parameter to one dtype. `source` keeps the parameter's storage alive,
// so the key (its autograd state's address) cannot be reused by another tensor while cached.
struct CachedCast {
  Tensor source;
  Tensor cast;
  uint64_t version;  // source storage's version when cast
  bool with_grad;    // cast recorded a gradient edge back to the source
};

struct CacheKey {
  const void* meta;
  DType dtype;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const {
    return std::hash<const void*>()(k.meta) * 31 + static_cast<std::size_t>(k.dtype);
  }
};

struct ThreadState {
  bool enabled = false;
  DType dtype = DType::BF16;
  int nesting = 0;  // live guards, enabled or not; the cache dies with the outermost
  std::unordered_map<CacheKey, CachedCast, CacheKeyHash> cache;
  AutocastStats stats;
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

bool castable(const Tensor& t) {
  return t.defined() &&
         (t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16);
}

Tensor counted_cast(const Tensor& t, DType dtype) {
  ++state().stats.casts;
  return t.to(dtype);
}

Tensor cast(const Tensor& t, DType dtype) {
  if (!castable(t) || t.dtype() == dtype) return t;
  // Only parameters are cached: leaves that require grad, identified by their shared autograd
  // state (every copy of a parameter's handle shares it).
  if (!(t.is_leaf() && t.requires_grad())) return counted_cast(t, dtype);
  ThreadState& s = state();
  const bool need_grad = grad_enabled();
  const CacheKey key{t.autograd_meta().get(), dtype};
  auto it = s.cache.find(key);
  if (it != s.cache.end()) {
    const CachedCast& c = it->second;
    const bool same_tensor = c.source.storage() == t.storage() &&
                             c.source.storage_offset() == t.storage_offset() &&
                             c.source.shape() == t.shape() && c.source.strides() == t.strides();
    if (same_tensor && c.version == t.storage()->version() && (c.with_grad || !need_grad)) {
      ++s.stats.cache_hits;
      return c.cast;
    }
  }
  Tensor out = counted_cast(t, dtype);
  s.cache.insert_or_assign(key, CachedCast{t, out, t.storage()->version(), need_grad});
  s.stats.cache_entries = s.cache.size();
  return out;
}

}  // namespace

Autocast::Autocast(DType dtype, bool enabled)
    : previous_enabled_(state().enabled), previous_dtype_(state().dtype) {
  MIXPREC_CHECK(!enabled || dtype == DType::BF16 || dtype == DType::F16,
                "[Autocast] the autocast dtype must be bf16 or f16, got ", dtype_name(dtype));
  ThreadState& s = state();
  ++s.nesting;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
}

Autocast::~Autocast() {
  ThreadState& s = state();
  s.enabled = previous_enabled_;
  s.dtype = previous_dtype_;
  if (--s.nesting == 0) {
    s.cache.clear();
    s.stats.cache_entries = 0;
  }
}

bool autocast_enabled() { return state().enabled; }
DType autocast_dtype() { return state().dtype; }

AutocastStats autocast_stats() { return state().stats; }
void reset_autocast_stats() {
  ThreadState& s = state();
  s.stats = AutocastStats{};
  s.stats.cache_entries = s.cache.size();
}

void apply_autocast(AutocastOp op, std::span<Tensor> inputs) {
  const ThreadState& s = state();
  if (!s.enabled) return;
  switch (policy_of(op)) {
    case CastPolicy::Lower:
      for (Tensor& t : inputs) t = cast(t, s.dtype);
      break;
    case CastPolicy::F32:
      for (Tensor& t : inputs) t = cast(t, DType::F32);
      break;
    case CastPolicy::Promote: {
      bool any = false;
      DType widest = DType::F32;
      for (const Tensor& t : inputs) {
        if (!castable(t)) continue;
        widest = any ? promote(widest, t.dtype()) : t.dtype();
        any = true;
      }
      if (any)
        for (Tensor& t : inputs) t = cast(t, widest);
      break;
    }
    case CastPolicy::Keep:
      break;
  }
}

}  // namespace mixprec::amp
