#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "mixprec/core/allocator.h"
#include "mixprec/core/error.h"

namespace mixprec {
namespace {

TEST(Allocator, SizeClassesAreAlignedAndBounded) {
  EXPECT_EQ(CachingAllocator::size_class(1), 64u);
  EXPECT_EQ(CachingAllocator::size_class(64), 64u);
  EXPECT_EQ(CachingAllocator::size_class(65), 128u);
  EXPECT_EQ(CachingAllocator::size_class(4096), 4096u);
  EXPECT_EQ(CachingAllocator::size_class(4097), 5120u);
  EXPECT_EQ(CachingAllocator::size_class(8192), 8192u);
  EXPECT_EQ(CachingAllocator::size_class(8193), 10240u);
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 26); bytes = bytes * 3 / 2 + 1) {
    const std::size_t cls = CachingAllocator::size_class(bytes);
    EXPECT_GE(cls, bytes);
    EXPECT_EQ(cls % CachingAllocator::kAlignment, 0u);
    if (bytes > 4096) {
      EXPECT_LE(cls, bytes + bytes / 4) << bytes;
    }
    EXPECT_EQ(CachingAllocator::size_class(cls), cls) << "a class size is its own class";
  }
}

TEST(Allocator, BlocksAre64ByteAlignedAndZeroIsNull) {
  CachingAllocator a;
  EXPECT_EQ(a.allocate(0), nullptr);
  a.deallocate(nullptr);
  std::vector<void*> blocks;
  for (std::size_t bytes : {1, 3, 63, 100, 4095, 10000, 123457})
    blocks.push_back(a.allocate(bytes));
  for (void* p : blocks) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  for (void* p : blocks) a.deallocate(p);
  EXPECT_EQ(a.stats().num_allocs, 7u);
}

TEST(Allocator, StatisticsForAKnownSequence) {
  CachingAllocator a;
  void* p1 = a.allocate(100);   // class 128
  void* p2 = a.allocate(5000);  // class 5120
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 128u + 5120u);
  EXPECT_EQ(s.reserved_bytes, 128u + 5120u);
  EXPECT_EQ(s.requested_bytes, 5100u);
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.os_allocs, 2u);
  EXPECT_EQ(s.cache_hits, 0u);

  a.deallocate(p1);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 5120u);
  EXPECT_EQ(s.reserved_bytes, 128u + 5120u) << "a freed block stays reserved in the cache";
  EXPECT_EQ(s.peak_allocated_bytes, 128u + 5120u);
  EXPECT_EQ(s.num_frees, 1u);

  void* p3 = a.allocate(120);  // same class as p1: served from the cache
  EXPECT_EQ(p3, p1);
  s = a.stats();
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.os_allocs, 2u);
  EXPECT_EQ(s.allocated_bytes, 128u + 5120u);

  void* p4 = a.allocate(64);  // a smaller class: a new block
  s = a.stats();
  EXPECT_EQ(s.os_allocs, 3u);
  EXPECT_EQ(s.allocated_bytes, 64u + 128u + 5120u);
  EXPECT_EQ(s.peak_allocated_bytes, 64u + 128u + 5120u);
  EXPECT_EQ(s.peak_reserved_bytes, 64u + 128u + 5120u);

  a.deallocate(p2);
  a.deallocate(p3);
  a.deallocate(p4);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 64u + 128u + 5120u);
  EXPECT_EQ(s.peak_allocated_bytes, 64u + 128u + 5120u);
  EXPECT_EQ(s.num_frees, 4u);

  a.reset_peak();
  s = a.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, s.reserved_bytes);

  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.os_frees, 3u);
  EXPECT_EQ(s.peak_reserved_bytes, 64u + 128u + 5120u) << "peaks only move on reset_peak";

  void* p5 = a.allocate(100);
  EXPECT_EQ(a.stats().cache_hits, 1u) << "the cache was emptied: no hit";
  a.deallocate(p5);
}

TEST(Allocator, SteadyStateLoopStopsAskingTheOs) {
  CachingAllocator a;
  for (int step = 0; step < 100; ++step) {
    std::vector<void*> activations;
    for (std::size_t bytes : {1000, 50000, 50000, 1 << 20})
      activations.push_back(a.allocate(bytes));
    for (void* p : activations) a.deallocate(p);
  }
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.os_allocs, 4u);
  EXPECT_EQ(s.cache_hits, 396u);
  EXPECT_EQ(s.num_allocs, 400u);
}

TEST(Allocator, HugeRequestIsAClearError) {
  CachingAllocator a;
  try {
    a.allocate(std::size_t{1} << 60);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[allocate]"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

TEST(Allocator, ThreadSafeUnderConcurrentUse) {
  CachingAllocator a;
  auto worker = [&a](int seed) {
    std::vector<void*> held;
    for (int i = 0; i < 5000; ++i) {
      held.push_back(a.allocate(64 + static_cast<std::size_t>((i * 7919 + seed) % 9000)));
      if (held.size() > 16) {
        a.deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* p : held) a.deallocate(p);
  };
  std::thread t1(worker, 1), t2(worker, 2), t3(worker, 3);
  t1.join();
  t2.join();
  t3.join();
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.num_allocs, 15000u);
  EXPECT_EQ(s.num_frees, 15000u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.os_allocs + s.cache_hits, 15000u);
}

TEST(Allocator, AllocationHandleReturnsItsBlock) {
  CachingAllocator& g = CachingAllocator::global();
  const std::size_t before = g.stats().allocated_bytes;
  {
    Allocation a(1000);
    EXPECT_EQ(g.stats().allocated_bytes, before + 1024);
    Allocation b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(g.stats().allocated_bytes, before + 1024);
  }
  EXPECT_EQ(g.stats().allocated_bytes, before);
}

using AllocatorDeathTest = ::testing::Test;
TEST(AllocatorDeathTest, ForeignPointerAbortsWithFileAndLine) {
  CachingAllocator a;
  int local = 0;
  EXPECT_DEATH(a.deallocate(&local), "allocator.cpp:[0-9]+");
}

}  // namespace
}  // namespace mixprec
