// The static memory plan: every input copy and intermediate gets an offset in one arena. Two
// buffers may share bytes when no kernel runs while both are alive. Placement is greedy, largest
// first (the order in which TFLite's and XLA's simple planners place tensors): each buffer takes
// the smallest gap between the buffers already placed that live at the same time and that it
// fits in, or the space above them all.
#include <algorithm>
#include <numeric>

#include "graph_impl.h"

namespace mixprec::graph {
namespace {

constexpr std::size_t kAlignment = CachingAllocator::kAlignment;

std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

bool live_together(const Buffer& a, const Buffer& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

void Graph::Impl::plan(bool reuse_memory) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.kind == BufferKind::Constant || b.first > b.last) continue;
    order.push_back(i);
    (b.kind == BufferKind::Input ? memory.input_bytes : memory.intermediate_bytes) +=
        aligned(b.bytes);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return buffers[x].bytes != buffers[y].bytes ? buffers[x].bytes > buffers[y].bytes
                                                : buffers[x].first < buffers[y].first;
  });

  std::vector<std::size_t> placed;  // buffer indices, in placement order
  std::size_t top = 0;
  for (std::size_t i : order) {
    Buffer& b = buffers[i];
    const std::size_t size = aligned(b.bytes);
    if (!reuse_memory) {
      b.offset = top;
      top += size;
      continue;
    }
    std::vector<std::size_t> neighbours;  // placed buffers alive at the same time, by offset
    for (std::size_t p : placed)
      if (live_together(buffers[p], b)) neighbours.push_back(p);
    std::sort(neighbours.begin(), neighbours.end(),
              [&](std::size_t x, std::size_t y) { return buffers[x].offset < buffers[y].offset; });
    std::size_t end = 0, best = 0, best_gap = SIZE_MAX;
    for (std::size_t p : neighbours) {
      const Buffer& n = buffers[p];
      if (n.offset >= end && n.offset - end >= size && n.offset - end < best_gap) {
        best = end;
        best_gap = n.offset - end;
      }
      end = std::max(end, n.offset + aligned(n.bytes));
    }
    b.offset = best_gap != SIZE_MAX ? best : end;
    top = std::max(top, b.offset + size);
    placed.push_back(i);
  }
  memory.arena_bytes = top;
}

}  // namespace mixprec::graph
