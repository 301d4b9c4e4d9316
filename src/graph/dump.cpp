// Graph::to_string and Graph::to_dot: what was recorded and where its memory lives.
#include <cstdio>
#include <sstream>

#include "graph_impl.h"

namespace mixprec::graph {
namespace {

std::string mib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// Where a buffer lives: "input 0", "const", "arena+4096".
std::string place(const Buffer& b) {
  switch (b.kind) {
    case BufferKind::Input: return "input " + std::to_string(b.input);
    case BufferKind::Constant: return "const";
    case BufferKind::Intermediate: return "arena+" + std::to_string(b.offset);
  }
  return "?";
}

std::string view_text(const Graph::Impl& g, int v) {
  if (v < 0) return "-";
  const View& view = g.views[static_cast<std::size_t>(v)];
  return std::string(dtype_name(view.dtype)) + shape_to_string(view.shape) + "@" +
         place(g.buffers[static_cast<std::size_t>(view.buffer)]);
}

}  // namespace

std::string Graph::to_string(const std::vector<double>& kernel_ms) const {
  const Impl& g = *impl_;
  std::ostringstream out;
  out << "graph: " << g.nodes.size() << " kernels (" << g.eliminated
      << " dropped as dead code, " << g.folded << " folded into constants, " << g.chains.size()
      << " elementwise chains run chunk by chunk, " << g.fused_upsamples
      << " upsamples read through by convolutions, " << g.elided_copies
      << " concatenation copies written by convolutions, " << g.fused_epilogues
      << " activations, adds and casts folded into their producer), " << g.staged.size()
      << " inputs, " << g.outputs.size() << " outputs\n";
  char index[24];
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::snprintf(index, sizeof index, "%4zu  ", i);
    out << index << n.op << "(";
    for (std::size_t k = 0; k < n.inputs.size(); ++k)
      out << (k ? ", " : "") << view_text(g, n.inputs[k]);
    out << ") -> ";
    for (std::size_t k = 0; k < n.outputs.size(); ++k)
      out << (k ? ", " : "") << view_text(g, n.outputs[k]);
    for (std::size_t c = 0; c < g.chains.size(); ++c)
      if (g.chains[c].first <= static_cast<int>(i) && static_cast<int>(i) < g.chains[c].end)
        out << "  [chain " << c << "]";
    if (i < kernel_ms.size()) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "  %.4f ms", kernel_ms[i]);
      out << ms;
    }
    out << "\n";
  }
  out << "outputs:";
  for (int v : g.output_views) out << " " << view_text(g, v);
  const MemoryPlan& m = g.memory;
  out << "\nmemory: arena " << mib(m.arena_bytes) << " (inputs " << mib(m.input_bytes)
      << "; most alive at once " << mib(m.live_peak_bytes) << ", " << m.in_place
      << " kernels in place), intermediates without reuse " << mib(m.intermediate_bytes)
      << ", eager peak "
      << mib(m.eager_peak_bytes) << ", constants referenced " << mib(m.constant_bytes) << "\n";
  return out.str();
}

std::string Graph::to_dot() const {
  const Impl& g = *impl_;
  std::ostringstream out;
  out << "digraph mixprec_graph {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n";
  for (std::size_t b = 0; b < g.buffers.size(); ++b) {
    const Buffer& buffer = g.buffers[b];
    if (buffer.first > buffer.last && buffer.kind != BufferKind::Constant) continue;
    out << "  b" << b << " [shape=ellipse, label=\"" << place(buffer) << "\\n"
        << dtype_name(buffer.dtype) << " " << buffer.bytes << " B\""
        << (buffer.kind == BufferKind::Constant ? ", style=dashed" : "") << "];\n";
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    out << "  k" << i << " [shape=box, label=\"" << i << ": " << n.op << "\"];\n";
    for (int v : n.inputs)
      if (v >= 0) out << "  b" << g.views[static_cast<std::size_t>(v)].buffer << " -> k" << i << ";\n";
    for (int v : n.outputs)
      if (v >= 0) out << "  k" << i << " -> b" << g.views[static_cast<std::size_t>(v)].buffer << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace mixprec::graph
