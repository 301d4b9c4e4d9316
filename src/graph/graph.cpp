// Capture (the recorder), replay, dead-code elimination and binding.
#include "mixprec/graph/graph.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "graph_impl.h"
#include "mixprec/core/error.h"
#include "mixprec/core/parallel.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/autograd/engine.h"
#include "mixprec/autograd/node.h"
#include "mixprec/mode/grad_mode.h"

namespace mixprec::graph {
namespace {

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + shape_to_string(t.shape());
}

// Receives what core and the op front-ends report during the recorded run.
class GraphRecorder final : public capture::Recorder {
 public:
  GraphRecorder(Graph::Impl& graph, const std::vector<Tensor>& inputs) : g_(graph) {
    g_.input_buffers.assign(inputs.size(), -1);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) continue;
      const int b = add_buffer(inputs[i], BufferKind::Input);
      g_.buffers[static_cast<std::size_t>(b)].input = static_cast<int>(i);
      g_.input_buffers[i] = b;
    }
  }

  void record(std::string_view op, std::span<const Tensor* const> inputs,
              std::span<const Tensor* const> outputs, capture::Kernel kernel,
              capture::Aliasing aliasing, capture::Fusions fusions) override {
    Node node;
    node.op = op;
    node.aliasing = aliasing;
    node.fusions = std::move(fusions);
    // Whether the kernel reads only constants and what such kernels made: only then may
    // fold_constants make its results constants, the recorded values. Every other result the
    // recorder lets go, so the recorded run holds no more memory than eager does.
    bool may_fold = true;
    for (const Tensor* t : inputs) {
      node.inputs.push_back(t ? view_of(*t, op, false) : -1);
      if (t != nullptr) may_fold = may_fold && holds_values(buffer_at(node.inputs.back()));
    }
    for (const Tensor* t : outputs) {
      node.outputs.push_back(t ? view_of(*t, op, true) : -1);
      if (t == nullptr || may_fold) continue;
      Buffer& b = buffer_at(node.outputs.back());
      if (b.kind == BufferKind::Intermediate) b.handle = Tensor();
    }
    node.kernel = std::move(kernel);
    g_.nodes.push_back(std::move(node));
  }

  void allocated(const Storage& storage) override {
    std::lock_guard lock(made_mutex_);  // any thread
    made_.insert(storage.id());
  }
  void host_constant(const Storage& storage) override { host_.insert(storage.id()); }

  void host_access(const Tensor* t, std::string_view what) override {
    MIXPREC_CHECK(t != nullptr, "[graph::capture] ", what,
                  " during the capture: a replay would repeat the same draws; pass random "
                  "tensors in as inputs");
    const uint64_t s = t->storage()->id();
    const auto it = index_.find(s);
    const bool computed = it != index_.end()
                              ? g_.buffers[static_cast<std::size_t>(it->second)].kind !=
                                    BufferKind::Constant
                              : made(s) && !host_.contains(s);
    MIXPREC_CHECK(!computed, "[graph::capture] host code used the values of a ", describe(*t),
                  " tensor the graph computes (", what,
                  "): data-dependent control flow or host arithmetic cannot be replayed; compute "
                  "it with tensor ops, or outside the captured function");
  }

  // The outputs: views that live to the end of the graph.
  void finish(const std::vector<Tensor>& outputs) {
    for (const Tensor& t : outputs) {
      const int v = t.defined() ? view_of(t, "output", false) : -1;
      g_.output_views.push_back(v);
      if (v >= 0) g_.buffers[static_cast<std::size_t>(g_.views[v].buffer)].output = true;
    }
  }

 private:
  Buffer& buffer_at(int view) {
    return g_.buffers[static_cast<std::size_t>(g_.views[static_cast<std::size_t>(view)].buffer)];
  }
  // A constant, or an intermediate whose recorded values are kept because it may fold.
  static bool holds_values(const Buffer& b) {
    return b.kind == BufferKind::Constant ||
           (b.kind == BufferKind::Intermediate && b.handle.defined());
  }

  int add_buffer(const Tensor& t, BufferKind kind) {
    Buffer b;
    b.kind = kind;
    b.handle = t;
    b.bytes = t.storage()->nbytes();
    b.dtype = t.dtype();
    g_.buffers.push_back(std::move(b));
    const int index = static_cast<int>(g_.buffers.size()) - 1;
    index_.emplace(t.storage()->id(), index);
    return index;
  }

  int buffer_of(const Tensor& t, std::string_view op, bool written) {
    const uint64_t s = t.storage()->id();
    int index;
    if (const auto it = index_.find(s); it != index_.end()) {
      index = it->second;
    } else if (made(s) && !host_.contains(s)) {
      MIXPREC_CHECK(written, "[graph::capture] '", op, "' reads a ", describe(t),
                    " tensor made during the capture that no recorded kernel wrote: code the "
                    "capture cannot see filled it (a kernel called directly, or host code "
                    "writing data_ptr()); run it through capture::launch");
      index = add_buffer(t, BufferKind::Intermediate);
    } else {
      index = add_buffer(t, BufferKind::Constant);  // a parameter, or host values given to a call
    }
    const Buffer& b = g_.buffers[static_cast<std::size_t>(index)];
    MIXPREC_CHECK(b.dtype == t.dtype(), "[graph::capture] '", op, "' sees a ",
                  dtype_name(b.dtype), " buffer as ", dtype_name(t.dtype()));
    if (written) {
      MIXPREC_CHECK(b.kind != BufferKind::Input, "[graph::capture] '", op,
                    "' writes into an input of the captured function; a replay writes into its "
                    "own copy of the input, so the caller would not see it: clone it first");
      MIXPREC_CHECK(!host_.contains(s), "[graph::capture] '", op,
                    "' writes into a tensor holding host values given during the capture "
                    "(Tensor::scalar, from_buffer): the next replay would start from the "
                    "changed values");
    }
    return index;
  }

  int view_of(const Tensor& t, std::string_view op, bool written) {
    View v;
    v.buffer = buffer_of(t, op, written);
    v.shape = t.shape();
    v.strides = t.strides();
    v.offset = t.storage_offset();
    v.dtype = t.dtype();
    g_.views.push_back(std::move(v));
    return static_cast<int>(g_.views.size()) - 1;
  }

  bool made(uint64_t storage_id) {
    std::lock_guard lock(made_mutex_);
    return made_.contains(storage_id);
  }

  // Storages by id (Storage::id), not address: the recorder keeps no intermediate alive that
  // cannot fold, and a storage made later may take a dead one's address.
  Graph::Impl& g_;
  std::unordered_map<uint64_t, int> index_;
  std::mutex made_mutex_;
  std::unordered_set<uint64_t> made_, host_;
};

bool same_dispatch(const DispatchConfig& a, const DispatchConfig& b) {
  return a.level == b.level && a.bf16_conv == b.bf16_conv &&
         a.pack_inference_weights == b.pack_inference_weights;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// Within what rounding once instead of twice moves a network's output: a relative L2
// distance of 5%, where work the capture missed leaves an output of another size altogether.
bool close(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (!is_floating(a.dtype())) return bit_equal(a, b);
  const Tensor x = a.to(DType::F64).contiguous(), y = b.to(DType::F64).contiguous();
  const double *xp = x.data<double>(), *yp = y.data<double>();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double u = xp[i], v = yp[i];
    if (std::isnan(u) != std::isnan(v)) return false;
    if (std::isnan(u)) continue;
    diff += (u - v) * (u - v);
    norm += u * u;
  }
  return std::sqrt(diff) <= 0.05 * std::sqrt(norm) + 1e-6;
}

}  // namespace

void Graph::Impl::fold_constants() {
  // Optimistic start: every kernel whose outputs are intermediates folds; then a kernel reading
  // a buffer that is neither constant nor folded does not, and a buffer is folded only while all
  // of its writers fold. Repeat until nothing changes.
  const std::size_t n = nodes.size();
  auto buffer_of = [&](int v) { return static_cast<std::size_t>(views[static_cast<std::size_t>(v)].buffer); };
  std::vector<bool> folds(n, true), folded_buffer(buffers.size(), false);
  for (std::size_t i = 0; i < n; ++i)
    for (int v : nodes[i].outputs)
      if (v >= 0) {
        folds[i] = folds[i] && buffers[buffer_of(v)].kind == BufferKind::Intermediate;
        folded_buffer[buffer_of(v)] = true;
      }
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (folds[i]) {
        for (int v : nodes[i].inputs)
          if (v >= 0 && buffers[buffer_of(v)].kind != BufferKind::Constant &&
              !folded_buffer[buffer_of(v)])
            folds[i] = false;
        for (int v : nodes[i].outputs)  // a buffer another, replayed kernel writes too
          if (v >= 0 && !folded_buffer[buffer_of(v)]) folds[i] = false;
        changed = changed || !folds[i];
      }
      if (folds[i]) continue;
      for (int v : nodes[i].outputs)
        if (v >= 0 && folded_buffer[buffer_of(v)]) {
          folded_buffer[buffer_of(v)] = false;
          changed = true;
        }
    }
  }
  // The recorded run already computed the folded buffers: their recorded storages become the
  // graph's constants.
  for (std::size_t b = 0; b < buffers.size(); ++b)
    if (folded_buffer[b]) buffers[b].kind = BufferKind::Constant;
  std::vector<Node> kept;
  for (std::size_t i = 0; i < n; ++i)
    if (!folds[i]) kept.push_back(std::move(nodes[i]));
  folded = n - kept.size();
  nodes = std::move(kept);
}

void Graph::Impl::prune(bool eliminate_dead_code) {
  const std::size_t n = nodes.size();
  std::vector<bool> live(n, !eliminate_dead_code);
  if (eliminate_dead_code) {
    // Backwards: a kernel lives if it writes a buffer something live reads, an output, or a
    // constant (an in-place update is a side effect).
    std::vector<bool> needed(buffers.size(), false);
    for (const Buffer& b : buffers)
      if (b.output) needed[static_cast<std::size_t>(&b - buffers.data())] = true;
    for (std::size_t i = n; i-- > 0;) {
      for (int v : nodes[i].outputs) {
        if (v < 0) continue;
        const auto b = static_cast<std::size_t>(views[static_cast<std::size_t>(v)].buffer);
        live[i] = live[i] || needed[b] || buffers[b].kind == BufferKind::Constant;
      }
      if (!live[i]) continue;
      for (int v : nodes[i].inputs)
        if (v >= 0) needed[static_cast<std::size_t>(views[static_cast<std::size_t>(v)].buffer)] = true;
    }
  }
  std::vector<Node> kept;
  for (std::size_t i = 0; i < n; ++i)
    if (live[i]) kept.push_back(std::move(nodes[i]));
  eliminated = n - kept.size();
  nodes = std::move(kept);

  set_lifetimes();
}

void Graph::Impl::set_lifetimes() {
  const int end = static_cast<int>(nodes.size());
  for (Buffer& b : buffers) {
    b.first = b.kind == BufferKind::Input ? -1 : end;
    b.last = b.kind == BufferKind::Input || b.output ? end : -1;
  }
  for (int i = 0; i < end; ++i) {
    for (const auto* list : {&nodes[static_cast<std::size_t>(i)].inputs,
                             &nodes[static_cast<std::size_t>(i)].outputs}) {
      for (int v : *list) {
        if (v < 0) continue;
        Buffer& b = buffers[static_cast<std::size_t>(views[static_cast<std::size_t>(v)].buffer)];
        b.first = std::min(b.first, i);
        b.last = std::max(b.last, i);
      }
    }
  }
}

void Graph::Impl::bind() {
  arena = std::make_shared<Allocation>(memory.arena_bytes);
  auto* base = static_cast<char*>(arena->data());
  for (Buffer& b : buffers) {
    memory.constant_bytes += b.kind == BufferKind::Constant ? b.bytes : 0;
    if (b.kind == BufferKind::Constant) {  // keeps its own tensor (the recorder kept them all)
      MIXPREC_ASSERT(b.handle.defined());
      continue;
    }
    // The recorded storage goes (its memory returns to the allocator); the arena takes over.
    const auto elements = static_cast<int64_t>(b.bytes / dtype_size(b.dtype));
    if (b.first > b.last) {
      b.handle = Tensor();  // only dead kernels touched it
    } else {
      b.handle = elements == 0
                     ? Tensor::empty({0}, b.dtype)
                     : Tensor::from_blob(base + b.offset, {elements}, {1}, b.dtype, arena);
    }
  }
  auto tensor_of = [&](int v) {
    if (v < 0) return Tensor();
    const View& view = views[static_cast<std::size_t>(v)];
    return buffers[static_cast<std::size_t>(view.buffer)].handle.as_strided(
        view.shape, view.strides, view.offset);
  };
  for (Node& node : nodes) {
    node.tensors.clear();
    node.tensors.reserve(node.inputs.size() + node.outputs.size());  // no reallocation below
    for (int v : node.inputs) node.tensors.push_back(tensor_of(v));
    for (int v : node.outputs) node.tensors.push_back(tensor_of(v));
    auto ptr = [&](std::size_t i) {
      return node.tensors[i].defined() ? &node.tensors[i] : nullptr;
    };
    for (std::size_t i = 0; i < node.inputs.size(); ++i) node.input_ptrs.push_back(ptr(i));
    for (std::size_t i = 0; i < node.outputs.size(); ++i)
      node.output_ptrs.push_back(ptr(node.inputs.size() + i));
  }
  staged.clear();
  for (int b : input_buffers) {
    if (b < 0) {
      staged.emplace_back();
      continue;
    }
    staged.push_back(buffers[static_cast<std::size_t>(b)].handle);  // capture() shapes it
  }
  outputs.clear();
  for (int v : output_views) outputs.push_back(tensor_of(v));
  bind_chains();
}

void Graph::Impl::execute() const {
  auto chain = chains.begin();
  for (std::size_t i = 0; i < nodes.size();) {
    if (chain != chains.end() && static_cast<std::size_t>(chain->first) == i) {
      run_chain(*chain);
      i = static_cast<std::size_t>(chain->end);
      ++chain;
      continue;
    }
    nodes[i].kernel({nodes[i].input_ptrs, nodes[i].output_ptrs});
    ++i;
  }
}

Graph capture(const Function& fn, const std::vector<Tensor>& example_inputs,
              const CaptureOptions& options) {
  MIXPREC_CHECK(capture::active() == nullptr,
                "[graph::capture] another capture is active on this thread");
  std::optional<InferenceMode> inference;
  if (!options.autograd) inference.emplace();
  auto impl = std::make_unique<Graph::Impl>();
  impl->config = dispatch_config();
  // Dense private copies of the arguments: every recorded view of an input is then relative to
  // a buffer whose layout the graph knows and owns.
  std::vector<Tensor> inputs;
  for (const Tensor& x : example_inputs) inputs.push_back(x.defined() ? x.clone() : Tensor());

  // Eager, twice: the first run fills the caches (packed weights), the second measures the peak.
  CachingAllocator& allocator = CachingAllocator::global();
  fn(inputs);
  {
    const std::size_t before = allocator.stats().allocated_bytes;
    allocator.reset_peak();
    fn(inputs);
    impl->memory.eager_peak_bytes = allocator.stats().peak_allocated_bytes - before;
  }

  std::vector<Tensor> recorded;
  {
    GraphRecorder recorder(*impl, inputs);
    capture::ScopedAllocationWatch watch(&recorder);
    MIXPREC_CHECK(watch.watching(), "[graph::capture] another thread is capturing a graph; "
                                    "captures run one at a time");
    capture::ScopedRecorder scope(&recorder);
    recorded = fn(inputs);
    recorder.finish(recorded);
  }
  if (options.fold_constants) impl->fold_constants();
  impl->prune(options.eliminate_dead_code);
  if (options.fuse_convolutions) impl->fuse_into_convolutions();
  if (options.fuse_epilogues) impl->fuse_epilogues();
  if (options.reuse_memory && options.reorder) impl->schedule();
  if (options.fuse_elementwise) impl->find_chains();
  impl->plan(options.reuse_memory);
  impl->bind();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined())
      impl->staged[i] =
          impl->staged[i].as_strided(inputs[i].shape(), inputs[i].strides(), 0);

  const bool rounds_differently = impl->fused_epilogues > 0;
  Graph graph(std::move(impl));
  // One replay per pool thread with that thread running every chunk: each thread's per-thread
  // scratch then holds what every kernel's largest chunk needs, so no later replay grows one
  // whichever thread takes which chunk (threads the pool starts later grow theirs once).
  // Each replay must be the recorded run bit for bit, or, where fused epilogues round once
  // instead of twice, close to it and the first replay bit for bit.
  std::vector<Tensor> first;
  for (int thread = 0; thread < num_threads(); ++thread) {
    ScopedSoleThread sole(thread);
    const std::vector<Tensor>& replayed = graph.run(inputs);
    if (!options.validate) continue;
    for (std::size_t i = 0; i < recorded.size(); ++i) {
      const bool same = rounds_differently
                            ? close(recorded[i], replayed[i]) &&
                                  (thread == 0 || bit_equal(first[i], replayed[i]))
                            : bit_equal(recorded[i], replayed[i]);
      MIXPREC_CHECK(same, "[graph::capture] output ", i, " of the replay on thread ", thread,
                    " differs from the recorded run: the function does work the capture "
                    "cannot see");
    }
    if (rounds_differently && thread == 0)
      for (const Tensor& t : replayed) first.push_back(t.defined() ? t.clone() : Tensor());
  }
  return graph;
}

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

const std::vector<Tensor>& Graph::run(const std::vector<Tensor>& inputs) {
  const Impl& g = *impl_;
  MIXPREC_CHECK(inputs.size() == g.staged.size(), "[Graph::run] captured with ", g.staged.size(),
                " inputs, got ", inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& want = g.staged[i];
    const Tensor& got = inputs[i];
    MIXPREC_CHECK(want.defined() == got.defined() &&
                      (!want.defined() ||
                       (want.shape() == got.shape() && want.dtype() == got.dtype())),
                  "[Graph::run] input ", i, " is ", got.defined() ? describe(got) : "undefined",
                  " but was captured as ", want.defined() ? describe(want) : "undefined",
                  "; capture again for other shapes (graph::CompiledFunction does)");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && !inputs[i].shares_storage(g.staged[i])) g.staged[i].copy_(inputs[i]);
  return run();
}

const std::vector<Tensor>& Graph::run() {
  MIXPREC_CHECK(same_dispatch(dispatch_config(), impl_->config),
                "[Graph::run] the kernel dispatch (level, bf16 convolution, packing) changed "
                "since the capture; capture again");
  impl_->execute();
  return impl_->outputs;
}

const std::vector<Tensor>& Graph::inputs() const { return impl_->staged; }
std::size_t Graph::size() const { return impl_->nodes.size(); }
std::size_t Graph::eliminated() const { return impl_->eliminated; }
std::size_t Graph::folded() const { return impl_->folded; }
std::size_t Graph::fused_chains() const { return impl_->chains.size(); }
std::size_t Graph::fused_kernels() const {
  std::size_t kernels = 0;
  for (const Chain& c : impl_->chains) kernels += static_cast<std::size_t>(c.end - c.first);
  return kernels;
}
std::size_t Graph::fused_upsamples() const { return impl_->fused_upsamples; }
std::size_t Graph::elided_copies() const { return impl_->elided_copies; }
std::size_t Graph::fused_epilogues() const { return impl_->fused_epilogues; }
const MemoryPlan& Graph::memory() const { return impl_->memory; }

std::vector<double> Graph::kernel_times(int rounds) const {
  MIXPREC_CHECK(rounds >= 1, "[Graph::kernel_times] rounds must be >= 1, got ", rounds);
  std::vector<double> ms(impl_->nodes.size(), 0.0);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < impl_->nodes.size(); ++i) {
      const Node& node = impl_->nodes[i];
      const auto t0 = std::chrono::steady_clock::now();
      node.kernel({node.input_ptrs, node.output_ptrs});
      ms[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count() /
               rounds;
    }
  }
  return ms;
}

std::vector<Graph::OpTime> Graph::profile(int rounds) const {
  MIXPREC_CHECK(rounds >= 1, "[Graph::profile] rounds must be >= 1, got ", rounds);
  const std::vector<double> ms = kernel_times(rounds);
  std::map<std::string, OpTime> by_op;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    OpTime& t = by_op[impl_->nodes[i].op];
    t.op = impl_->nodes[i].op;
    t.ms += ms[i];
    ++t.count;
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_op) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

std::vector<std::string> Graph::ops() const {
  std::vector<std::string> out;
  for (const Node& n : impl_->nodes) out.push_back(n.op);
  return out;
}

Function with_gradients(LossFunction loss_fn, std::vector<Tensor> params) {
  return [loss_fn = std::move(loss_fn), params = std::move(params)](const std::vector<Tensor>& in) {
    std::vector<Tensor> kept;
    for (const Tensor& p : params) {
      kept.push_back(p.grad());
      p.zero_grad();
    }
    const std::vector<Tensor> results = loss_fn(in);
    const Tensor loss = results.empty() ? Tensor() : results[0];
    MIXPREC_CHECK(loss.defined() && loss.numel() == 1 && loss.requires_grad(),
                  "[graph::with_gradients] the loss must be a scalar that depends on parameters "
                  "requiring grad; got ",
                  loss.defined() ? describe(loss) : "undefined");
    autograd::backward({loss});
    std::vector<Tensor> out{loss.detach()};
    for (std::size_t i = 0; i < params.size(); ++i) {
      out.push_back(params[i].grad());
      if (params[i].autograd_meta() != nullptr) params[i].autograd_meta()->grad = kept[i];
    }
    for (std::size_t i = 1; i < results.size(); ++i) out.push_back(results[i].detach());
    return out;
  };
}

void set_gradients(const std::vector<Tensor>& params, const std::vector<Tensor>& outputs) {
  MIXPREC_CHECK(outputs.size() >= params.size() + 1, "[graph::set_gradients] ", params.size(),
                " parameters need ", params.size() + 1, " outputs (the loss first), got ",
                outputs.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    MIXPREC_CHECK(params[i].autograd_meta() != nullptr,
                  "[graph::set_gradients] parameter ", i, " does not require grad");
    params[i].autograd_meta()->grad = outputs[i + 1];
  }
}

// ---- CompiledFunction ----

CompiledFunction::CompiledFunction(Function fn, CaptureOptions options)
    : fn_(std::move(fn)), options_(options) {}

const std::vector<Tensor>& CompiledFunction::operator()(const std::vector<Tensor>& inputs) {
  // The signature as numbers, in a buffer kept across calls: a replay's lookup allocates nothing.
  const DispatchConfig config = dispatch_config();
  key_.clear();
  key_.insert(key_.end(), {static_cast<int64_t>(config.level), static_cast<int64_t>(config.bf16_conv),
                           config.pack_inference_weights ? 1 : 0,
                           amp::autocast_enabled() ? static_cast<int64_t>(amp::autocast_dtype()) : -1});
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      key_.push_back(-1);
      continue;
    }
    key_.push_back(static_cast<int64_t>(t.dtype()));
    key_.push_back(t.dim());
    key_.insert(key_.end(), t.shape().begin(), t.shape().end());
    key_.insert(key_.end(), t.strides().begin(), t.strides().end());
  }
  auto it = graphs_.find(key_);
  if (it == graphs_.end()) it = graphs_.emplace(key_, capture(fn_, inputs, options_)).first;
  last_ = &it->second;
  return last_->run(inputs);
}

void CompiledFunction::clear() {
  graphs_.clear();
  last_ = nullptr;
}

}  // namespace mixprec::graph
