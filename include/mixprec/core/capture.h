#pragma once
// Graph capture's hook into core and the op front-ends. The graph layer (graph/graph.h)
// implements the Recorder; everything below it only reports to it.
//
// Every kernel an op runs goes through launch(): the kernel runs now and, while a capture is
// active on this thread, the recorder also gets it as a function of the tensors it reads and
// writes, so a replay can run the same call on other memory (the graph's arena) without
// walking the op front-end again. Core reports the rest of what a replay must know: which
// storages were made during the capture, which of them hold host values given to the call
// (Tensor::scalar, from_buffer: constants of the graph), and host code reading tensor elements
// or drawing random numbers (data-dependent work a replay cannot repeat).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string_view>
#include <utility>

#include "mixprec/core/profiler.h"

namespace mixprec {

class Storage;
class Tensor;

namespace capture {

// The tensors one kernel call reads and writes, in the order the op named them. An absent
// optional input (no bias, say) is nullptr.
struct KernelArgs {
  std::span<const Tensor* const> inputs;
  std::span<const Tensor* const> outputs;
  const Tensor& in(std::size_t i) const { return *inputs[i]; }
  const Tensor* optional(std::size_t i) const { return inputs[i]; }
  const Tensor& out(std::size_t i) const { return *outputs[i]; }
};

// A kernel call as a replay runs it: everything but the tensors is captured by value.
using Kernel = std::function<void(const KernelArgs&)>;

// What a memory plan may assume about a kernel.
enum class Aliasing : uint8_t {
  None,         // the output may not share memory with any input
  Elementwise,  // output element i depends only on input element i, and every input element
                // is read before the same place of the output is written: the output may take
                // the place of an input of the same size and layout that dies here
  FirstInput,   // the first output may take the place of the first input only (the same size
                // and layout, dying here): a normalization, which reads every input element an
                // output element depends on (its statistics first) before writing that element
};

// What a graph pass may change about a kernel beyond where its tensors live (graph/graph.h).
struct Fusions {
  // The kernel is a nearest-neighbour upsampling of input 0 by this power of two (0: it is not).
  int64_t nearest_upsample = 0;
  // The same kernel reading input 0 as its nearest-neighbour upsampling by `factor` (a power of
  // two): input 0 is then the small tensor and the upsampling is not made. Null: it cannot.
  std::function<Kernel(int64_t factor)> reading_upsampled;
  // Output 0 may be a channel slice of a channels_last tensor (strides [P*H*W, 1, P*W, P]),
  // written in place: a concatenation's part, without the copy.
  bool writes_channel_slice = false;
  // The same kernel applying the activation `op` names (a unary kernel's op: "silu", ...) to
  // its output before rounding it: the activation's own kernel then goes. Returns a null
  // Kernel for an activation it does not take. Null: it takes none.
  std::function<Kernel(std::string_view op)> applying_activation;
  // The input slot a residual may fill (absent in this call): the kernel then adds that tensor
  // (the output's shape, dtype and layout) to its result before rounding it. -1: none.
  int residual_input = -1;
  // Output 0 may be of another floating dtype than recorded (f64 only if it was f64): the
  // kernel reads the output's dtype at each call and rounds its f32 result once into it, so a
  // cast of the output that follows folds into the kernel.
  bool writes_any_dtype = false;
};

class Recorder {
 public:
  virtual ~Recorder() = default;
  // One kernel call, after it ran: `op` names it in dumps.
  virtual void record(std::string_view op, std::span<const Tensor* const> inputs,
                      std::span<const Tensor* const> outputs, Kernel kernel, Aliasing aliasing,
                      Fusions fusions) = 0;
  // A storage made while the capture is active (Tensor::empty and friends), on any thread.
  virtual void allocated(const Storage& storage) = 0;
  // A storage filled with host values the caller passed in (Tensor::scalar, from_buffer,
  // arange): a constant of the graph, the same at every replay.
  virtual void host_constant(const Storage& storage) = 0;
  // Host code read or wrote the elements of `tensor` (value(), item(), set(), printing), or,
  // with tensor == nullptr, drew random numbers: `what` names it.
  virtual void host_access(const Tensor* tensor, std::string_view what) = 0;
};

namespace detail {
inline thread_local Recorder* active_recorder = nullptr;
// Storages are watched on every thread: a function whose ops run on other threads (a pool's
// workers) makes tensors this thread's recorder does not see the kernels of; watching where they
// were made lets the capture refuse to bake their values in as constants.
inline std::atomic<Recorder*> allocation_watcher{nullptr};
}

// This thread's recorder while a capture is active, else nullptr.
inline Recorder* active() { return detail::active_recorder; }

// Installs a recorder (or nullptr: none) on this thread for its lifetime.
class ScopedRecorder {
 public:
  explicit ScopedRecorder(Recorder* recorder) : previous_(detail::active_recorder) {
    detail::active_recorder = recorder;
  }
  ~ScopedRecorder() { detail::active_recorder = previous_; }
  ScopedRecorder(const ScopedRecorder&) = delete;
  ScopedRecorder& operator=(const ScopedRecorder&) = delete;

 private:
  Recorder* previous_;
};

// Runs `kernel` on the tensors now and, while a capture is active, records it as `op`. The
// kernel must capture everything but its tensors by value: a replay calls it later on other
// memory. Host reads inside the kernel are its own business, not the caller's, so the recorder
// is paused while it runs.
template <class F>
void launch(std::string_view op, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<const Tensor*> outputs, F&& kernel,
            Aliasing aliasing = Aliasing::None, Fusions fusions = {}) {
  const profiler::Timer timer(op);
  const KernelArgs args{{inputs.begin(), inputs.size()}, {outputs.begin(), outputs.size()}};
  Recorder* recorder = active();
  if (recorder == nullptr) {
    kernel(args);
    return;
  }
  {
    ScopedRecorder pause(nullptr);
    kernel(args);
  }
  recorder->record(op, args.inputs, args.outputs, Kernel(std::forward<F>(kernel)), aliasing,
                   std::move(fusions));
}

// Installs `recorder` as the process's allocation watcher for its lifetime (one capture at a
// time); Recorder::allocated is then called from any thread.
class ScopedAllocationWatch {
 public:
  explicit ScopedAllocationWatch(Recorder* recorder) {
    Recorder* none = nullptr;
    watching_ = detail::allocation_watcher.compare_exchange_strong(none, recorder);
  }
  ~ScopedAllocationWatch() {
    if (watching_) detail::allocation_watcher.store(nullptr);
  }
  bool watching() const { return watching_; }  // false: another capture watches already
  ScopedAllocationWatch(const ScopedAllocationWatch&) = delete;
  ScopedAllocationWatch& operator=(const ScopedAllocationWatch&) = delete;

 private:
  bool watching_ = false;
};

// Core's reports (no-ops without a capture).
inline void note_allocated(const Storage& storage) {
  if (Recorder* r = detail::allocation_watcher.load(std::memory_order_acquire)) r->allocated(storage);
}
inline void note_host_constant(const Storage& storage) {
  if (Recorder* r = active()) r->host_constant(storage);
}
inline void note_host_access(const Tensor* tensor, std::string_view what) {
  if (Recorder* r = active()) r->host_access(tensor, what);
}

}  // namespace capture
}  // namespace mixprec
