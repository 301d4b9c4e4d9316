// The per-thread scratch of isa/thread_scratch.h, compiled for plain x86-64.
#include "thread_scratch.h"

#include <array>
#include <cstring>

#include "mixprec/core/allocator.h"

namespace mixprec::kernels {

void* thread_scratch(ScratchSlot slot, std::size_t bytes) {
  thread_local std::array<Allocation, static_cast<std::size_t>(ScratchSlot::Count)> buffers;
  Allocation& buffer = buffers[static_cast<std::size_t>(slot)];
  if (buffer.size() < bytes) {
    buffer = Allocation(bytes);
    std::memset(buffer.data(), 0, bytes);
  }
  return buffer.data();
}

}  // namespace mixprec::kernels
