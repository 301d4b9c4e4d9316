#include "mixprec/core/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>

#include "mixprec/core/error.h"

namespace mixprec {

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  free_cached_locked();
}

CachingAllocator& CachingAllocator::global() {
  // Never destroyed: tensors in static storage may outlive any ordinary static.
  static CachingAllocator* instance = new CachingAllocator();
  return *instance;
}

std::size_t CachingAllocator::size_class(std::size_t bytes) {
  constexpr std::size_t kSmall = 4096;
  if (bytes <= kSmall)
    return std::max<std::size_t>(kAlignment, (bytes + kAlignment - 1) & ~(kAlignment - 1));
  // Four classes per power of two: step = 2^(floor(log2(bytes - 1)) - 2).
  const std::size_t top = std::bit_floor(bytes - 1);
  const std::size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  MIXPREC_CHECK(bytes <= (std::size_t{1} << 48), "[allocate] request of ", bytes,
                " bytes is larger than any machine's memory");
  const std::size_t cls = size_class(bytes);
  std::lock_guard lock(mutex_);

  void* block = nullptr;
  if (auto it = cache_.find(cls); it != cache_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
  } else {
    block = std::aligned_alloc(kAlignment, cls);
    if (block == nullptr) {  // give the cache back and try once more
      free_cached_locked();
      block = std::aligned_alloc(kAlignment, cls);
    }
    MIXPREC_CHECK(block != nullptr, "[allocate] out of memory: could not get ", cls, " bytes (",
                  stats_.allocated_bytes, " bytes already allocated)");
    ++stats_.os_allocs;
    stats_.reserved_bytes += cls;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  live_.emplace(block, LiveBlock{cls, bytes});
  ++stats_.num_allocs;
  stats_.allocated_bytes += cls;
  stats_.requested_bytes += bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return block;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_.find(ptr);
  MIXPREC_ASSERT(it != live_.end() && "deallocate of a pointer this allocator does not own");
  const LiveBlock block = it->second;
  live_.erase(it);
  cache_[block.class_bytes].push_back(ptr);
  ++stats_.num_frees;
  stats_.allocated_bytes -= block.class_bytes;
  stats_.requested_bytes -= block.requested_bytes;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  free_cached_locked();
}

void CachingAllocator::free_cached_locked() {
  for (auto& [cls, blocks] : cache_) {
    for (void* block : blocks) {
      std::free(block);
      stats_.reserved_bytes -= cls;
      ++stats_.os_frees;
    }
  }
  cache_.clear();
}

}  // namespace mixprec
