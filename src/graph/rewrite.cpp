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

// Whether `node` reads `buffer` through one of its inputs from input `first` on.
bool reads(const Graph::Impl& g, const Node& node, int buffer, std::size_t first) {
  return std::any_of(node.inputs.begin() + static_cast<std::ptrdiff_t>(first), node.inputs.end(),
                     [&](int v) {
                       return v >= 0 && g.views[static_cast<std::size_t>(v)].buffer == buffer;
                     });
}

// An intermediate that is not an output of the graph: its memory is the graph's to plan away.
bool private_intermediate(const Buffer& b) {
  return b.kind == BufferKind::Intermediate && !b.output;
}

// Removes the kernels marked in `removed` and sets every buffer's lifetime again.
void drop_nodes(Graph::Impl& g, const std::vector<bool>& removed) {
  std::vector<Node> kept;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  g.set_lifetimes();
}

}  // namespace

void Graph::Impl::fuse_into_convolutions() {
  std::vector<bool> removed(nodes.size(), false);
  const auto view = [&](int v) -> const View& { return views[static_cast<std::size_t>(v)]; };
  const auto reads = [&](const Node& node, int buffer, std::size_t first) {
    return graph::reads(*this, node, buffer, first);
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

  drop_nodes(*this, removed);
}

// An elementwise kernel that only finishes another's output (CaptureOptions::fuse_epilogues):
// a SiLU after a GroupNorm becomes the GroupNorm's activation, an add after a convolution its
// residual epilogue, a cast of a convolution's output the dtype the convolution writes. The
// producer then writes where the elementwise kernel wrote, with one rounding where there were
// two: the results move by up to a rounding of the output dtype (a narrowing cast of an f32
// result rounds once either way, so it moves nothing).
// A producer takes one finisher per sweep; sweeps repeat while they fold something, so a linear
// layer followed by a GELU, an add and a cast takes all three.
void Graph::Impl::fuse_epilogues() {
  while (fuse_epilogue_sweep() > 0) {
  }
}

std::size_t Graph::Impl::fuse_epilogue_sweep() {
  std::vector<bool> removed(nodes.size(), false);
  const std::vector<Uses> uses = uses_of(*this);
  std::size_t folded_now = 0;
  const auto view = [&](int v) -> const View& { return views[static_cast<std::size_t>(v)]; };
  // The same elements in the same order: one view, or two dense row-major views of a buffer's
  // same span (a linear layer writes [M, N] what the next op reads as [B, T, N]).
  const auto row_major = [](const View& v) { return v.strides == contiguous_strides(v.shape); };
  const auto same_elements = [&](const View& a, const View& b) {
    return a.dtype == b.dtype && shape_numel(a.shape) == shape_numel(b.shape) &&
           ((a.shape == b.shape && a.strides == b.strides) || (row_major(a) && row_major(b)));
  };
  // `like`'s shape and strides on `at`'s buffer and offset: what the producer reads or writes
  // in place of a view the elementwise kernel had.
  const auto rehome = [&](int like, int at) {
    View v = view(like);
    v.buffer = view(at).buffer;
    v.offset = view(at).offset;
    views.push_back(v);
    return static_cast<int>(views.size()) - 1;
  };
  // A cast that changes nothing but the dtype: the same elements in the same places.
  const auto same_places = [&](const View& a, const View& b) {
    View retyped = a;
    retyped.dtype = b.dtype;
    return a.dtype != b.dtype && (a.dtype == DType::F64) == (b.dtype == DType::F64) &&
           is_floating(a.dtype) && is_floating(b.dtype) && same_elements(retyped, b);
  };
  for (int p = 0; p < static_cast<int>(nodes.size()); ++p) {
    Node& producer = nodes[static_cast<std::size_t>(p)];
    const bool takes_activation = static_cast<bool>(producer.fusions.applying_activation);
    const int slot = producer.fusions.residual_input;
    const bool takes_cast = producer.fusions.writes_any_dtype;
    if (removed[static_cast<std::size_t>(p)] || (!takes_activation && slot < 0 && !takes_cast) ||
        producer.outputs.empty() || producer.outputs[0] < 0)
      continue;
    const int made_view = producer.outputs[0];
    const View& made = view(made_view);
    const Uses& made_uses = uses[static_cast<std::size_t>(made.buffer)];
    if (!private_intermediate(buffers[static_cast<std::size_t>(made.buffer)]) ||
        made_uses.writers.size() != 1 || made_uses.readers.size() != 1)
      continue;
    const int q = made_uses.readers[0];
    const Node& finisher = nodes[static_cast<std::size_t>(q)];
    if (q <= p || removed[static_cast<std::size_t>(q)] || finisher.outputs.size() != 1 ||
        finisher.outputs[0] < 0 || finisher.aliasing != capture::Aliasing::Elementwise)
      continue;
    const View& result = view(finisher.outputs[0]);
    const Uses& result_uses = uses[static_cast<std::size_t>(result.buffer)];
    const bool cast = takes_cast && finisher.op == "copy" && finisher.inputs.size() == 1 &&
                      same_places(made, result);
    // The producer writes the result earlier than the finisher did: nothing in between may
    // see that buffer, and the producer must not read it.
    if (!(cast || same_elements(result, made)) || result.buffer == made.buffer ||
        any_between(result_uses.readers, p, q) || any_between(result_uses.writers, p, q) ||
        reads(*this, producer, result.buffer, 0))
      continue;
    const auto reads_made = [&](int v) {
      return v >= 0 && view(v).buffer == made.buffer && view(v).offset == made.offset &&
             same_elements(view(v), made);
    };
    capture::Kernel fused;
    int residual = -1;
    if (cast) {
      const View& read = view(finisher.inputs[0]);
      if (read.buffer == made.buffer && read.offset == made.offset && read.shape == made.shape &&
          read.strides == made.strides && read.dtype == made.dtype)
        fused = producer.kernel;  // the same kernel: it writes whatever dtype its output has
    } else if (takes_activation && finisher.inputs.size() == 1 && reads_made(finisher.inputs[0])) {
      fused = producer.fusions.applying_activation(finisher.op);
    } else if (slot >= 0 && finisher.op == "add" && finisher.inputs.size() == 2 &&
               static_cast<std::size_t>(slot) < producer.inputs.size() &&
               producer.inputs[static_cast<std::size_t>(slot)] < 0 &&
               reads_made(finisher.inputs[0]) != reads_made(finisher.inputs[1])) {
      residual = finisher.inputs[reads_made(finisher.inputs[0]) ? 1 : 0];
      const View& r = view(residual);
      // The other operand, whole and laid out as the output, finished before the producer runs.
      if (!same_elements(r, made) || r.buffer == made.buffer || r.buffer == result.buffer ||
          any_between(uses[static_cast<std::size_t>(r.buffer)].writers, p, q))
        continue;
      fused = producer.kernel;  // the same kernel: the residual slot is now filled
    }
    if (!fused) continue;
    producer.kernel = std::move(fused);
    const DType written = result.dtype;  // (rehome may move `views`, and `result` with it)
    if (residual >= 0) producer.inputs[static_cast<std::size_t>(slot)] = rehome(made_view, residual);
    producer.outputs[0] = rehome(made_view, finisher.outputs[0]);
    views.back().dtype = written;  // a cast's result; anything else has the made dtype anyway
    producer.op += "+" + (cast ? "to_" + std::string(dtype_name(written)) : finisher.op);
    // What the kernel may still take, in the epilogue's order (bias, activation, residual, one
    // rounding into the output's dtype): after an activation a residual; after a residual
    // nothing but a cast; after a cast what it took before.
    if (cast) {
      producer.fusions.writes_any_dtype = false;
    } else {
      producer.fusions.applying_activation = nullptr;
      if (residual >= 0) producer.fusions.residual_input = -1;
    }
    removed[static_cast<std::size_t>(q)] = true;
    ++folded_now;
  }
  drop_nodes(*this, removed);
  fused_epilogues += folded_now;
  return folded_now;
}

}  // namespace mixprec::graph
