#pragma once
// Tensor: a strided view (shape, element strides, storage offset, dtype) onto a shared Storage
// that owns one block of the caching allocator, so every tensor byte shows up in
// CachingAllocator::global().stats().
//
// Semantics follow PyTorch:
//   - copying a Tensor is cheap and shares the storage (writes through one copy are seen by
//     the other); clone() makes an independent deep copy;
//   - views (slice, select, transpose, permute, view, expand, ...) never copy; they return a
//     new Tensor on the same storage with other strides;
//   - methods that write (copy_, fill_, set, ...) end in '_' or say so, and are const: they
//     change the elements, never the handle, exactly like PyTorch's C++ API;
//   - sizes, strides and offsets count elements; dims may be negative (-1 is the last).
// Every user mistake throws mixprec::Error whose message names the op in brackets, the shapes
// involved and what was expected.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mixprec/core/allocator.h"
#include "mixprec/core/dtype.h"
#include "mixprec/core/error.h"
#include "mixprec/core/shape.h"

namespace mixprec {

class Generator;

// The bytes behind one or more tensors. Shared by a tensor and all its views.
// Its version counts in-place writes (PyTorch's version counter): every Tensor method that
// writes (copy_, fill_, zero_, set) and every optimizer step bumps it, so a cache of values
// derived from the storage (autocast's weight casts) can tell that it went stale. Code that
// writes through data_ptr() into an existing tensor that others may have read should call
// bump_version() too.
//
// A storage may also borrow memory it does not own (a numpy array, a DLPack tensor): then
// `owner` is whatever keeps that memory valid, released with the last tensor on the storage.
// Borrowed bytes do not come from the caching allocator and so are not in its statistics.
//
// Its id is unique in the process: a storage made after another died may take its address, but
// never its id (a graph capture tells storages apart by it, without keeping them alive).
class Storage {
 public:
  explicit Storage(std::size_t nbytes) : allocation_(nbytes) {}
  Storage(void* borrowed, std::size_t nbytes, std::shared_ptr<void> owner)
      : borrowed_(borrowed), borrowed_bytes_(nbytes), owner_(std::move(owner)) {}
  uint64_t id() const { return id_; }
  void* data() const { return borrowed_ != nullptr ? borrowed_ : allocation_.data(); }
  std::size_t nbytes() const { return borrowed_ != nullptr ? borrowed_bytes_ : allocation_.size(); }
  bool is_borrowed() const { return borrowed_ != nullptr; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  Allocation allocation_;
  void* borrowed_ = nullptr;
  std::size_t borrowed_bytes_ = 0;
  std::shared_ptr<void> owner_;
  uint64_t version_ = 0;
  uint64_t id_ = next_id();

  static uint64_t next_id();
};

// Defined by the autograd layer. A Tensor only holds the slot: copies of a Tensor share it
// (so a parameter and its copies agree on requires_grad and grad); every new tensor and every
// view gets its own (AutogradHooks::make_meta) once the autograd layer is linked in.
struct AutogradMeta;
class Tensor;
namespace autograd {
struct Node;
}

namespace detail {
// How core tells the autograd layer that a tensor was derived from one that has autograd
// state: as a view (slice, permute, view, expand, ...) or as a copy (to, contiguous, clone).
// The autograd layer installs these when it is linked in; core calls them only for sources
// that carry autograd state, so tensors outside autograd pay one pointer test.
struct AutogradHooks {
  // Every new tensor gets its own autograd state up front, so that all later copies of the
  // handle share it: requires_grad_() on one copy is seen by the others (as in PyTorch).
  std::shared_ptr<AutogradMeta> (*make_meta)() = nullptr;
  void (*record_view)(const Tensor& base, const Tensor& view) = nullptr;
  void (*record_copy)(const Tensor& source, const Tensor& copy) = nullptr;
};
AutogradHooks& autograd_hooks();
}  // namespace detail

class Tensor {
 public:
  // "Until the end of the dim" for slice().
  static constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

  Tensor() = default;  // undefined: defined() is false; data access and views throw

  // ---- creation (all memory from the caching allocator) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32,
                      MemoryFormat format = MemoryFormat::Contiguous);
  // Same shape (and dtype unless given); Preserve keeps `like`'s strides when it is dense.
  static Tensor empty_like(const Tensor& like, MemoryFormat format = MemoryFormat::Preserve);
  static Tensor empty_like(const Tensor& like, DType dtype,
                           MemoryFormat format = MemoryFormat::Preserve);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32,
                      MemoryFormat format = MemoryFormat::Contiguous);
  static Tensor ones(const Shape& shape, DType dtype = DType::F32,
                     MemoryFormat format = MemoryFormat::Contiguous);
  // `value` is converted once by the conversion kernel (RNE for 16-bit floats, truncation
  // toward zero with saturation for integers).
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     MemoryFormat format = MemoryFormat::Contiguous);
  static Tensor scalar(double value, DType dtype = DType::F32);  // 0-d
  // [start, end) by step, ceil((end - start) / step) elements, each start + i * step computed
  // in f64 and rounded once to `dtype`.
  static Tensor arange(double end, DType dtype = DType::F32);
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32);
  // Copies the values; a 1-D tensor unless a shape (with the same element count) is given.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Copies numel(shape) contiguous elements of `dtype` from `data`.
  static Tensor from_buffer(const void* data, const Shape& shape, DType dtype);
  // Wraps memory owned elsewhere without copying (the Python bindings' numpy and DLPack
  // import): `data` is element 0, strides count elements and must be >= 0, and `owner` is kept
  // alive until the last tensor or view on this storage is gone. The caller vouches that every
  // reachable element is valid, writable memory of `dtype`.
  static Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                          std::shared_ptr<void> owner);

  // Random tensors (floating dtypes). Values are drawn in f32 (f64 for F64 tensors) from the
  // generator's counter-based stream, then rounded RNE by the conversion kernel, so the result
  // is bit-identical for a given generator state on every ISA level and thread count. The
  // overloads without a Generator use default_generator().
  // Uniform draws take as many random bits as the dtype has significand bits (24 for f32, 11
  // for f16, 8 for bf16), so every unit value k / 2^bits is exact in the dtype and rand()
  // stays in [0, 1) after the rounding to 16 bits (a 24-bit draw would round up to 1.0).
  static Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::F32);
  static Tensor rand(const Shape& shape, DType dtype = DType::F32);
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::F32);
  static Tensor randn(const Shape& shape, DType dtype = DType::F32);
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen,
                        DType dtype = DType::F32);  // lo + (hi - lo) * rand
  static Tensor uniform(const Shape& shape, double lo, double hi, DType dtype = DType::F32);
  static Tensor normal(const Shape& shape, double mean, double std, Generator& gen,
                       DType dtype = DType::F32);  // mean + std * randn
  static Tensor normal(const Shape& shape, double mean, double std, DType dtype = DType::F32);

  // ---- queries ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Strides& strides() const { return strides_; }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const;
  std::size_t element_size() const { return dtype_size(dtype_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  int64_t storage_offset() const { return offset_; }
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  bool is_non_overlapping_and_dense() const;
  // ChannelsLast for a 4-D tensor laid out NHWC (and not also plain contiguous, unless its
  // strides are exactly channels-last's, as a one-channel NHWC view's are), else Contiguous:
  // the layout outputs of layout-preserving ops (elementwise, convolutions) take.
  MemoryFormat suggest_memory_format() const;

  // The first element (storage data + offset); nullptr for a tensor without elements.
  void* data_ptr() const;
  // Typed data_ptr(); throws if T is not the tensor's dtype.
  template <typename T>
  T* data() const;
  bool shares_storage(const Tensor& other) const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // ---- views: no copy, same storage ----
  // Python-style bounds: negative start/end count from the end and both are clamped into the
  // dim; step must be positive.
  Tensor slice(int64_t dim, int64_t start, int64_t end = kEnd, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose(0, 1) for <= 2 dims
  Tensor permute(const std::vector<int64_t>& dims) const;
  // Same elements in a new shape (one size may be -1, inferred). Throws when the strides
  // cannot express it without a copy, as PyTorch does; reshape() copies in that case.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  // Broadcast: size-1 dims (and new leading dims) repeat with stride 0; -1 keeps a size.
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;               // drops every size-1 dim
  Tensor squeeze(int64_t dim) const;    // drops `dim` if it has size 1, else returns a view as is
  Tensor unsqueeze(int64_t dim) const;  // dim in [-dim()-1, dim()]
  // Merges dims start..end into one (a view when possible, else a copy, like reshape).
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Raw view for kernels and tests; every reachable element must lie inside the storage.
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t storage_offset) const;

  // ---- copies and conversion ----
  // *this when already in `format`, else a copy laid out in it.
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  // *this (same storage) for the same dtype, like PyTorch; else a converted copy that keeps
  // the layout when it is dense.
  Tensor to(DType dtype) const;
  Tensor to(MemoryFormat format) const;  // same as contiguous(format); Preserve is a no-op
  Tensor clone(MemoryFormat format = MemoryFormat::Preserve) const;
  // Writes src into *this: src broadcasts to shape(), converts to dtype(); any strides on
  // either side; src may overlap *this (it is copied first then). Returns *this.
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const;

  // ---- element access (tests, printing, small host-side logic; not for hot loops) ----
  template <typename T>
  T item() const;  // numel must be 1; converts to T
  // The raw element at `index` (one index per dim, negatives wrap); T must be the dtype.
  template <typename T>
  T at(std::initializer_list<int64_t> index) const;
  // The element converted to double / set from a double (RNE for 16-bit floats).
  double value(std::initializer_list<int64_t> index) const;
  double value(std::span<const int64_t> index) const;
  void set(std::initializer_list<int64_t> index, double value) const;
  void set(std::span<const int64_t> index, double value) const;

  // ---- autograd (implemented by the autograd layer, src/autograd/tensor_autograd.cpp) ----
  // As in PyTorch: a leaf that requires grad accumulates .grad() on backward(); ops on it
  // record a graph while grad mode is on (see mode/grad_mode.h).
  bool requires_grad() const;
  const Tensor& requires_grad_(bool on = true) const;  // leaves only
  Tensor grad() const;     // undefined until a backward reaches this tensor
  void zero_grad() const;  // drops the gradient (PyTorch's set_to_none)
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Backpropagates from this tensor: a scalar, or with `gradient` of this tensor's shape (an
  // undefined `gradient` means 1 for a scalar).
  void backward() const;
  void backward(const Tensor& gradient, bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no autograd history
  // The raw slot, for the autograd layer.
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_meta_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta) const {
    autograd_meta_ = std::move(meta);
  }

  // ---- printing ----
  // Like PyTorch: "tensor([[1.0000, 2.0000], [3.0000, 4.0000]], dtype=bf16)". One line when it
  // fits in 80 columns, else one row per line; over 1000 elements each dim shows its first
  // and last 3 entries around "..." and the shape is printed.
  std::string to_string() const;
  friend std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

 private:
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
         DType dtype);
  // A view of this tensor's storage with another geometry.
  Tensor make_view(Shape shape, Strides strides, int64_t offset) const;
  void check_defined(const char* op) const;
  // Element offset (from data_ptr()) of `index`, bounds-checked with messages naming `op`.
  int64_t element_offset(std::span<const int64_t> index, const char* op) const;
  // Converts the element at `offset` (elements from data_ptr()) into `out` of dtype `to`.
  void read_element(int64_t offset, DType to, void* out) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
  // Mutable like PyTorch's: requires_grad_() on a const handle attaches autograd state.
  mutable std::shared_ptr<AutogradMeta> autograd_meta_;
};

// ---- template definitions ----

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  const int64_t n = shape_numel(shape, "from_vector");
  MIXPREC_CHECK(static_cast<int64_t>(values.size()) == n, "[from_vector] ", values.size(),
                " values cannot fill shape ", shape_to_string(shape), " (", n, " elements)");
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> packs bits; Bool tensors hold bytes
    const std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_buffer(bytes.data(), shape, DType::Bool);
  } else {
    return from_buffer(values.data(), shape, dtype_of<T>);
  }
}

template <typename T>
T* Tensor::data() const {
  MIXPREC_CHECK(dtype_of<T> == dtype_, "[data] requested ", dtype_name(dtype_of<T>),
                " elements from a tensor of dtype ", dtype_name(dtype_));
  return static_cast<T*>(data_ptr());
}

template <typename T>
T Tensor::item() const {
  check_defined("item");
  MIXPREC_CHECK(numel() == 1, "[item] expected a tensor with one element, got shape ",
                shape_to_string(shape_), " (", numel(), " elements)");
  T out{};
  read_element(0, dtype_of<T>, &out);
  return out;
}

template <typename T>
T Tensor::at(std::initializer_list<int64_t> index) const {
  MIXPREC_CHECK(dtype_of<T> == dtype_, "[at] requested a ", dtype_name(dtype_of<T>),
                " element from a tensor of dtype ", dtype_name(dtype_), "; use value() to convert");
  return data<T>()[element_offset(std::span<const int64_t>(index.begin(), index.size()), "at")];
}

}  // namespace mixprec
