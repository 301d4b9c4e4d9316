#pragma once
// The caching allocator every tensor's storage comes from. Blocks are 64-byte aligned and
// rounded up to a size class; a freed block goes back to a per-class cache instead of the OS,
// so steady-state training and inference loops stop calling malloc. Statistics follow
// PyTorch's memory_stats(): "allocated" is bytes in blocks handed out (class sizes),
// "reserved" is allocated plus cached.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mixprec {

struct MemoryStats {
  std::size_t allocated_bytes = 0;       // in blocks currently handed out
  std::size_t peak_allocated_bytes = 0;  // max of allocated_bytes since the last reset_peak()
  std::size_t reserved_bytes = 0;        // allocated + cached, i.e. held from the OS
  std::size_t peak_reserved_bytes = 0;
  std::size_t requested_bytes = 0;  // what callers asked for, before rounding
  uint64_t num_allocs = 0;          // allocate() calls that returned a block
  uint64_t num_frees = 0;           // deallocate() calls that returned a block
  uint64_t cache_hits = 0;          // allocations served from the cache
  uint64_t os_allocs = 0;           // blocks obtained from the OS
  uint64_t os_frees = 0;            // blocks given back to the OS (empty_cache)
};

class CachingAllocator {
 public:
  static constexpr std::size_t kAlignment = 64;

  CachingAllocator() = default;
  ~CachingAllocator();  // returns every cached block; outstanding blocks are the owners' leak
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The process-wide allocator tensors use.
  static CachingAllocator& global();

  // A 64-byte aligned block of at least `bytes` (nullptr for 0). On OS failure the cache is
  // emptied and the request retried once; then it throws Error naming the size.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr);  // nullptr is a no-op; a pointer not from here aborts

  MemoryStats stats() const;
  void reset_peak();   // peaks restart from the current values
  void empty_cache();  // gives every cached block back to the OS

  // The class a request is rounded to: multiples of 64 bytes up to 4 KiB, then four classes
  // per power of two (at most 25% slack, bounded fragmentation).
  static std::size_t size_class(std::size_t bytes);

 private:
  void free_cached_locked();

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> cache_;  // class size -> free blocks
  struct LiveBlock {
    std::size_t class_bytes;
    std::size_t requested_bytes;
  };
  std::unordered_map<void*, LiveBlock> live_;  // blocks handed out
  MemoryStats stats_;
};

// RAII handle to one block of the global allocator (what a tensor's storage holds).
class Allocation {
 public:
  Allocation() = default;
  explicit Allocation(std::size_t bytes)
      : ptr_(CachingAllocator::global().allocate(bytes)), bytes_(bytes) {}
  ~Allocation() { CachingAllocator::global().deallocate(ptr_); }
  Allocation(Allocation&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  Allocation& operator=(Allocation&& other) noexcept {
    if (this != &other) {
      CachingAllocator::global().deallocate(ptr_);
      ptr_ = other.ptr_;
      bytes_ = other.bytes_;
      other.ptr_ = nullptr;
      other.bytes_ = 0;
    }
    return *this;
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }

  // At least `bytes` of space: the block is replaced by a larger one when it is smaller
  // (contents not kept). What per-thread workspaces, grown on demand and reused, call.
  void* reserve(std::size_t bytes) {
    if (bytes_ < bytes) *this = Allocation(bytes);
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace mixprec
