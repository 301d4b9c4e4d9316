// The static memory plan: every input copy and intermediate gets an offset in one arena. Two
// buffers may share bytes when no kernel runs while both are alive, and an elementwise kernel may
// write its output over an input it reads last. Placement is greedy (as TFLite's and XLA's simple
// planners): in a given order, each buffer takes the smallest gap between the buffers already
// placed that live at the same time and that it fits in, or the space above them all.
#include <algorithm>
#include <cstdint>

#include "graph_impl.h"

namespace mixprec::graph {
namespace {

constexpr std::size_t kAlignment = CachingAllocator::kAlignment;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

bool live_together(const Buffer& a, const Buffer& b) {
  return a.first <= b.last && b.first <= a.last;
}

// A kernel's output takes the place of an input buffer whose last reader it is, when the kernel
// allows it (capture::Aliasing: any input of an elementwise kernel, the first of a
// normalization) and the two are the same bytes seen the same way (the same size, dtype and
// view).
void share_in_place(Graph::Impl& g) {
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    const bool elementwise = node.aliasing == capture::Aliasing::Elementwise;
    if (node.aliasing == capture::Aliasing::None || node.outputs.empty() || node.outputs[0] < 0 ||
        (elementwise && node.outputs.size() != 1))
      continue;
    const View& out = g.views[static_cast<std::size_t>(node.outputs[0])];
    Buffer& o = g.buffers[static_cast<std::size_t>(out.buffer)];
    if (o.kind != BufferKind::Intermediate || o.first != static_cast<int>(i) || o.shares >= 0)
      continue;
    const std::size_t candidates = elementwise ? node.inputs.size() : 1;
    for (std::size_t c = 0; c < candidates; ++c) {
      const int v = node.inputs[c];
      if (v < 0) continue;
      const View& in = g.views[static_cast<std::size_t>(v)];
      const Buffer& b = g.buffers[static_cast<std::size_t>(in.buffer)];
      const bool same_place = in.buffer != out.buffer && b.kind == BufferKind::Intermediate &&
                              !b.output && b.last == static_cast<int>(i) && b.bytes == o.bytes &&
                              b.dtype == o.dtype;
      // Every view of that buffer this kernel reads must be the output's view.
      bool same_views = same_place;
      for (int w : node.inputs) {
        if (w < 0 || g.views[static_cast<std::size_t>(w)].buffer != in.buffer) continue;
        const View& other = g.views[static_cast<std::size_t>(w)];
        same_views = same_views && other.shape == out.shape && other.strides == out.strides &&
                     other.offset == out.offset;
      }
      if (!same_views) continue;
      // The input's place now holds the output too: one lifetime from the input's start to the
      // output's end. Earlier sharers of the input follow it.
      int root = in.buffer;
      while (g.buffers[static_cast<std::size_t>(root)].shares >= 0)
        root = g.buffers[static_cast<std::size_t>(root)].shares;
      o.shares = root;
      Buffer& r = g.buffers[static_cast<std::size_t>(root)];
      r.last = std::max(r.last, o.last);
      r.output = r.output || o.output;
      ++g.memory.in_place;
      break;
    }
  }
}

// The most bytes alive across one kernel (the arena's inputs and intermediates, a buffer
// computed in place of another counted in its place): the least any placement needs.
std::size_t live_peak(const Graph::Impl& g) {
  std::size_t peak = 0;
  for (int i = -1; i <= static_cast<int>(g.nodes.size()); ++i) {
    std::size_t alive = 0;
    for (const Buffer& b : g.buffers)
      if (b.kind != BufferKind::Constant && b.shares < 0 && b.first <= i && i <= b.last)
        alive += aligned(b.bytes);
    peak = std::max(peak, alive);
  }
  return peak;
}

// live_peak in the current order after in-place sharing. Leaves the graph as it was.
std::size_t sharing_live_peak(Graph::Impl& g) {
  const std::vector<Buffer> saved = g.buffers;
  const MemoryPlan saved_memory = g.memory;
  share_in_place(g);
  const std::size_t peak = live_peak(g);
  g.buffers = saved;
  g.memory = saved_memory;
  return peak;
}

}  // namespace

void Graph::Impl::schedule() {
  const std::size_t n = nodes.size();
  auto buffers_of = [&](const Node& node) {  // each buffer the kernel touches, once
    std::vector<int> touched;
    for (const auto* list : {&node.inputs, &node.outputs})
      for (int v : *list)
        if (v >= 0) touched.push_back(views[static_cast<std::size_t>(v)].buffer);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    return touched;
  };
  // Dependencies, per buffer: a reader after the last writer, a writer after the last writer and
  // every reader since (constants included: a KV cache written, then read).
  std::vector<std::vector<std::size_t>> after(n);  // after[i]: kernels that must follow i
  std::vector<int> waiting(n, 0);                  // kernels i must follow, not yet run
  std::vector<int> last_writer(buffers.size(), -1);
  std::vector<std::vector<std::size_t>> readers(buffers.size());
  auto edge = [&](int from, std::size_t to) {
    if (from < 0 || static_cast<std::size_t>(from) == to) return;
    after[static_cast<std::size_t>(from)].push_back(to);
    ++waiting[to];
  };
  std::vector<std::vector<int>> touched(n);
  std::vector<int> users(buffers.size(), 0);  // kernels touching each buffer
  for (std::size_t i = 0; i < n; ++i) {
    for (int v : nodes[i].inputs)
      if (v >= 0) {
        const int b = views[static_cast<std::size_t>(v)].buffer;
        edge(last_writer[static_cast<std::size_t>(b)], i);
        readers[static_cast<std::size_t>(b)].push_back(i);
      }
    for (int v : nodes[i].outputs)
      if (v >= 0) {
        const auto b = static_cast<std::size_t>(views[static_cast<std::size_t>(v)].buffer);
        edge(last_writer[b], i);
        for (std::size_t r : readers[b]) edge(static_cast<int>(r), i);
        last_writer[b] = static_cast<int>(i);
        readers[b].clear();
      }
    touched[i] = buffers_of(nodes[i]);
    for (int b : touched[i]) ++users[static_cast<std::size_t>(b)];
  }
  // Greedy list scheduling: of the kernels whose dependencies ran, the one that adds the fewest
  // bytes (intermediates it starts, less those it is the last to touch); the earliest on a tie,
  // so a graph where nothing is gained keeps its order.
  auto planned = [&](int b) {
    return buffers[static_cast<std::size_t>(b)].kind == BufferKind::Intermediate;
  };
  std::vector<bool> started(buffers.size(), false), done(n, false);
  std::vector<std::size_t> order;
  order.reserve(n);
  for (std::size_t step = 0; step < n; ++step) {
    std::size_t best = n;
    int64_t best_cost = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i] || waiting[i] > 0) continue;
      int64_t cost = 0;
      for (int b : touched[i]) {
        if (!planned(b)) continue;
        const auto bytes = static_cast<int64_t>(buffers[static_cast<std::size_t>(b)].bytes);
        if (!started[static_cast<std::size_t>(b)]) cost += bytes;
        if (users[static_cast<std::size_t>(b)] == 1 && !buffers[static_cast<std::size_t>(b)].output)
          cost -= bytes;
      }
      if (best == n || cost < best_cost) {
        best = i;
        best_cost = cost;
      }
    }
    done[best] = true;
    order.push_back(best);
    for (int b : touched[best]) {
      started[static_cast<std::size_t>(b)] = true;
      --users[static_cast<std::size_t>(b)];
    }
    for (std::size_t next : after[best]) --waiting[next];
  }
  // Kept only where it lowers the peak.
  const std::size_t before = sharing_live_peak(*this);
  std::vector<Node> original = std::move(nodes);
  nodes.clear();
  for (std::size_t i : order) nodes.push_back(std::move(original[i]));
  set_lifetimes();
  if (sharing_live_peak(*this) < before) return;
  for (std::size_t k = 0; k < n; ++k) original[order[k]] = std::move(nodes[k]);
  nodes = std::move(original);
  set_lifetimes();
}

void Graph::Impl::plan(bool reuse_memory) {
  if (reuse_memory) share_in_place(*this);
  extend_chain_lifetimes();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    if (b.kind == BufferKind::Constant || b.first > b.last || b.shares >= 0) continue;
    order.push_back(i);
    (b.kind == BufferKind::Input ? memory.input_bytes : memory.intermediate_bytes) +=
        aligned(b.bytes);
  }
  memory.live_peak_bytes = live_peak(*this);
  // Greedy placement depends on the order; three classic ones are tried and the smallest arena
  // kept (largest first, longest-lived first, earliest first).
  auto place = [&](const std::vector<std::size_t>& sequence, std::vector<std::size_t>& offsets) {
    std::vector<std::size_t> placed;  // indices into sequence
    std::size_t top = 0;
    offsets.assign(sequence.size(), 0);
    for (std::size_t s = 0; s < sequence.size(); ++s) {
      const Buffer& b = buffers[sequence[s]];
      const std::size_t size = aligned(b.bytes);
      if (!reuse_memory) {
        offsets[s] = top;
        top += size;
        continue;
      }
      std::vector<std::size_t> neighbours;  // placed buffers alive at the same time, by offset
      for (std::size_t p : placed)
        if (live_together(buffers[sequence[p]], b)) neighbours.push_back(p);
      std::sort(neighbours.begin(), neighbours.end(),
                [&](std::size_t x, std::size_t y) { return offsets[x] < offsets[y]; });
      std::size_t end = 0, best = 0, best_gap = SIZE_MAX;
      for (std::size_t p : neighbours) {
        if (offsets[p] >= end && offsets[p] - end >= size && offsets[p] - end < best_gap) {
          best = end;
          best_gap = offsets[p] - end;
        }
        end = std::max(end, offsets[p] + aligned(buffers[sequence[p]].bytes));
      }
      offsets[s] = best_gap != SIZE_MAX ? best : end;
      top = std::max(top, offsets[s] + size);
      placed.push_back(s);
    }
    return top;
  };
  auto by = [&](auto key) {
    std::vector<std::size_t> sequence = order;
    std::stable_sort(sequence.begin(), sequence.end(), [&](std::size_t x, std::size_t y) {
      return key(buffers[x]) > key(buffers[y]);
    });
    return sequence;
  };
  const std::vector<std::vector<std::size_t>> orders{
      by([](const Buffer& b) { return static_cast<double>(b.bytes); }),
      by([](const Buffer& b) { return static_cast<double>(b.bytes) * (b.last - b.first + 1); }),
      by([](const Buffer& b) { return -static_cast<double>(b.first); })};
  std::size_t top = SIZE_MAX;
  for (const auto& sequence : orders) {
    std::vector<std::size_t> offsets;
    const std::size_t arena = place(sequence, offsets);
    if (arena >= top) continue;
    top = arena;
    for (std::size_t s = 0; s < sequence.size(); ++s) buffers[sequence[s]].offset = offsets[s];
  }
  if (order.empty()) top = 0;
  memory.arena_bytes = top;
  for (Buffer& b : buffers)  // sharers live where their root does
    if (b.shares >= 0) {
      int root = b.shares;
      while (buffers[static_cast<std::size_t>(root)].shares >= 0)
        root = buffers[static_cast<std::size_t>(root)].shares;
      b.offset = buffers[static_cast<std::size_t>(root)].offset;
    }
}

}  // namespace mixprec::graph
