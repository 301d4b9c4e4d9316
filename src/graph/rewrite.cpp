// Kernels folded into the convolutions around them (CaptureOptions::fuse_convolutions).
//
// Both passes take away a tensor, not arithmetic: the kernels that remain compute the same
// values in the same order, so the replay stays bit-identical to eager (the capture's validation
// checks it). What goes is memory: an upsampled tensor (four times its input) and a
// convolution's output waiting to be copied into a concatenation, often together at a decoder's
// peak.
#include <algorithm>
#include <string>

#include "graph_impl.h"
#include "mixprec/core/shape.h"

namespace mixprec::graph {
namespace {

// The kernels that read and that write each buffer, each kernel once, in node order.
struct Uses {
  std::vector<int> readers, writers;
};

std::vector<Uses> uses_of(const Graph::Impl& g) {
  std::vector<Uses> uses(g.buffers.size());
  auto note = [&](std::vector<int>& list, int node) {
    if (list.empty() || list.back() != node) list.push_back(node);
  };
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[static_cast<std::size_t>(i)];
    for (int v : n.inputs)
      if (v >= 0)
        note(uses[static_cast<std::size_t>(g.views[static_cast<std::size_t>(v)].buffer)].readers,
             i);
    for (int v : n.outputs)
      if (v >= 0)
        note(uses[static_cast<std::size_t>(g.views[static_cast<std::size_t>(v)].buffer)].writers,
             i);
  }
  return uses;
}

bool same_view(const View& a, const View& b) {
  return a.buffer == b.buffer && a.shape == b.shape && a.strides == b.strides &&
         a.offset == b.offset && a.dtype == b.dtype;
}

// Whether one of `kernels` runs strictly between kernels `after` and `before`.
bool any_between(const std::vector<int>& kernels, int after, int before) {
  return std::any_of(kernels.begin(), kernels.end(),
                     [&](int i) { return i > after && i < before; });
}

// An intermediate that is not an output of the graph: its memory is the graph's to plan away.
bool private_intermediate(const Buffer& b) {
  return b.kind == BufferKind::Intermediate && !b.output;
}

}  // namespace

void Graph::Impl::fuse_into_convolutions() {
  std::vector<bool> removed(nodes.size(), false);
  const auto view = [&](int v) -> const View& { return views[static_cast<std::size_t>(v)]; };
  // Whether `node` reads `buffer` through one of its inputs from input `first` on.
  const auto reads = [&](const Node& node, int buffer, std::size_t first) {
    return std::any_of(node.inputs.begin() + static_cast<std::ptrdiff_t>(first), node.inputs.end(),
                       [&](int v) { return v >= 0 && view(v).buffer == buffer; });
  };

  // A nearest upsample whose result only one convolution reads, as its input x: the convolution
  // reads the small tensor, each pixel 2^k times (Conv2dOptions::input_scale).
  std::vector<Uses> uses = uses_of(*this);
  for (int u = 0; u < static_cast<int>(nodes.size()); ++u) {
    const Node& up = nodes[static_cast<std::size_t>(u)];
    if (up.fusions.nearest_upsample == 0) continue;
    const View& big = view(up.outputs[0]);
    const auto b = static_cast<std::size_t>(big.buffer);
    if (!private_intermediate(buffers[b]) || uses[b].writers.size() != 1 ||
        uses[b].readers.size() != 1)
      continue;
    const int c = uses[b].readers[0];
    Node& conv = nodes[static_cast<std::size_t>(c)];
    if (c < u || !conv.fusions.reading_upsampled || !same_view(view(conv.inputs[0]), big)) continue;
    // The small tensor must still hold what the upsample read when the convolution reads it.
    const int small = up.inputs[0];
    if (reads(conv, big.buffer, 1) ||
        any_between(uses[static_cast<std::size_t>(view(small).buffer)].writers, u, c))
      continue;
    conv.kernel = conv.fusions.reading_upsampled(up.fusions.nearest_upsample);
    conv.fusions.reading_upsampled = nullptr;
    conv.inputs[0] = small;
    conv.op = up.op + "+" + conv.op;
    removed[static_cast<std::size_t>(u)] = true;
    ++fused_upsamples;
  }

  // A copy into a concatenation of a convolution's output that nothing else reads: the
  // convolution writes its channel slice of the concatenation instead.
  uses = uses_of(*this);
  for (int k = 0; k < static_cast<int>(nodes.size()); ++k) {
    const Node& copy = nodes[static_cast<std::size_t>(k)];
    if (removed[static_cast<std::size_t>(k)] || copy.op != "copy") continue;
    const View& from = view(copy.inputs[0]);
    const View& to = view(copy.outputs[0]);
    const auto bs = static_cast<std::size_t>(from.buffer), bd = static_cast<std::size_t>(to.buffer);
    if (bs == bd || !private_intermediate(buffers[bs]) ||
        buffers[bd].kind != BufferKind::Intermediate || from.dtype != to.dtype ||
        from.shape != to.shape || channel_slice_pixel_stride(to.shape, to.strides) == 0 ||
        uses[bs].writers.size() != 1 || uses[bs].readers.size() != 1)
      continue;
    const int p = uses[bs].writers[0];
    Node& producer = nodes[static_cast<std::size_t>(p)];
    if (p > k || removed[static_cast<std::size_t>(p)] || !producer.fusions.writes_channel_slice ||
        !same_view(view(producer.outputs[0]), from))
      continue;
    // Writing the slice earlier changes nothing if no kernel in between sees the
    // concatenation, and the producer does not read it.
    if (reads(producer, to.buffer, 0) || any_between(uses[bd].writers, p, k) ||
        any_between(uses[bd].readers, p, k))
      continue;
    producer.outputs[0] = copy.outputs[0];
    removed[static_cast<std::size_t>(k)] = true;
    ++elided_copies;
  }

  std::vector<Node> kept;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  set_lifetimes();
}

}  // namespace mixprec::graph
