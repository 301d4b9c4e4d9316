// Tensor construction, queries and element access. Views live in tensor_views.cpp, copies and
// conversion in tensor_copy.cpp, factories in tensor_factory.cpp, printing in tensor_print.cpp.
#include "mixprec/core/tensor.h"

#include <atomic>

#include "mixprec/core/capture.h"
#include "mixprec/kernels/convert.h"

namespace mixprec {

uint64_t Storage::next_id() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
               DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype),
      autograd_meta_(detail::autograd_hooks().make_meta != nullptr
                         ? detail::autograd_hooks().make_meta()
                         : nullptr) {
  MIXPREC_ASSERT(storage_ != nullptr);
  MIXPREC_ASSERT(shape_.size() == strides_.size());
  MIXPREC_ASSERT(offset_ >= 0);
}

namespace detail {
AutogradHooks& autograd_hooks() {
  static AutogradHooks hooks;
  return hooks;
}
}  // namespace detail

Tensor Tensor::make_view(Shape shape, Strides strides, int64_t offset) const {
  Tensor view(storage_, std::move(shape), std::move(strides), offset, dtype_);
  if (autograd_meta_ != nullptr && detail::autograd_hooks().record_view != nullptr)
    detail::autograd_hooks().record_view(*this, view);
  return view;
}

void Tensor::check_defined(const char* op) const {
  MIXPREC_CHECK(defined(), "[", op, "] called on an undefined tensor (default-constructed)");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemoryFormat format) {
  const int64_t n = shape_numel(shape, "empty");
  Strides strides = strides_for(shape, format, "empty");
  auto storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * dtype_size(dtype));
  capture::note_allocated(*storage);
  return Tensor(std::move(storage), shape, std::move(strides), 0, dtype);
}

Tensor Tensor::empty_like(const Tensor& like, MemoryFormat format) {
  return empty_like(like, like.dtype(), format);
}

Tensor Tensor::empty_like(const Tensor& like, DType dtype, MemoryFormat format) {
  like.check_defined("empty_like");
  if (format != MemoryFormat::Preserve) return empty(like.shape(), dtype, format);
  if (!like.is_non_overlapping_and_dense())
    return empty(like.shape(), dtype, like.suggest_memory_format());
  // Dense in some dim order: the same strides address exactly numel slots from offset 0.
  const int64_t n = like.numel();
  auto storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * dtype_size(dtype));
  capture::note_allocated(*storage);
  return Tensor(std::move(storage), like.shape(), like.strides(), 0, dtype);
}

int64_t Tensor::size(int64_t dim) const { return shape_[normalize_dim(dim, this->dim(), "size")]; }

int64_t Tensor::stride(int64_t dim) const {
  return strides_[normalize_dim(dim, this->dim(), "stride")];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;  // validated when the shape was made
  return n;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  switch (format) {
    case MemoryFormat::Contiguous:
      return is_contiguous_layout(shape_, strides_);
    case MemoryFormat::ChannelsLast:
      return is_channels_last_layout(shape_, strides_);
    case MemoryFormat::Preserve:
      break;
  }
  throw Error(
      "[is_contiguous] memory format 'preserve' is not a layout; ask about "
      "contiguous or channels_last");
}

bool Tensor::is_non_overlapping_and_dense() const {
  return mixprec::is_non_overlapping_and_dense(shape_, strides_);
}

MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() != 4 || !is_channels_last_layout(shape_, strides_)) return MemoryFormat::Contiguous;
  if (!is_contiguous_layout(shape_, strides_)) return MemoryFormat::ChannelsLast;
  // Dense both ways (one channel, or one pixel): the strides tell which layout made the tensor,
  // as in PyTorch; a view with channels-last strides keeps its outputs channels-last.
  return strides_ == channels_last_strides(shape_) && strides_ != contiguous_strides(shape_)
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  auto* base = static_cast<char*>(storage_->data());
  if (base == nullptr) return nullptr;  // zero-byte storage
  return base + offset_ * static_cast<int64_t>(element_size());
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && storage_ == other.storage_;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides,
                          int64_t storage_offset) const {
  check_defined("as_strided");
  MIXPREC_CHECK(shape.size() == strides.size(), "[as_strided] shape ", shape_to_string(shape),
                " and strides ", shape_to_string(strides), " must have the same length");
  const int64_t n = shape_numel(shape, "as_strided");
  MIXPREC_CHECK(storage_offset >= 0, "[as_strided] storage offset must be >= 0, got ",
                storage_offset);
  int64_t last = storage_offset;  // highest element index reachable
  for (std::size_t i = 0; i < shape.size(); ++i) {
    MIXPREC_CHECK(strides[i] >= 0, "[as_strided] negative strides are not supported, got ",
                  shape_to_string(strides));
    if (n > 0) last += (shape[i] - 1) * strides[i];
  }
  const auto capacity = static_cast<int64_t>(storage_->nbytes() / element_size());
  MIXPREC_CHECK(n == 0 || last < capacity, "[as_strided] shape ", shape_to_string(shape),
                " with strides ", shape_to_string(strides), " and offset ", storage_offset,
                " reaches element ", last, ", beyond the storage's ", capacity, " elements");
  return make_view(shape, strides, storage_offset);
}

// ---- element access ----

int64_t Tensor::element_offset(std::span<const int64_t> index, const char* op) const {
  check_defined(op);
  capture::note_host_access(this, op);
  MIXPREC_CHECK(static_cast<int64_t>(index.size()) == dim(), "[", op, "] expected ", dim(),
                " indices for a tensor of shape ", shape_to_string(shape_), ", got ",
                shape_to_string({index.begin(), index.end()}));
  int64_t offset = 0;
  for (std::size_t d = 0; d < index.size(); ++d) {
    const int64_t size = shape_[d];
    int64_t i = index[d];
    MIXPREC_CHECK(i >= -size && i < size, "[", op, "] index ", i, " is out of range for dim ", d,
                  " of size ", size, " (shape ", shape_to_string(shape_), ")");
    if (i < 0) i += size;
    offset += i * strides_[d];
  }
  return offset;
}

void Tensor::read_element(int64_t offset, DType to, void* out) const {
  capture::note_host_access(this, "item");
  const auto* p =
      static_cast<const char*>(data_ptr()) + offset * static_cast<int64_t>(element_size());
  kernels::convert(p, dtype_, out, to, 1);
}

double Tensor::value(std::initializer_list<int64_t> index) const {
  return value(std::span<const int64_t>(index.begin(), index.size()));
}

double Tensor::value(std::span<const int64_t> index) const {
  double out = 0.0;
  read_element(element_offset(index, "value"), DType::F64, &out);
  return out;
}

void Tensor::set(std::initializer_list<int64_t> index, double value) const {
  set(std::span<const int64_t>(index.begin(), index.size()), value);
}

void Tensor::set(std::span<const int64_t> index, double value) const {
  const int64_t offset = element_offset(index, "set");
  storage_->bump_version();
  auto* p = static_cast<char*>(data_ptr()) + offset * static_cast<int64_t>(element_size());
  // One rounding from f64, as the conversion kernel's contract promises.
  kernels::convert(&value, DType::F64, p, dtype_, 1);
}

}  // namespace mixprec
