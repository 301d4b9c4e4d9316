// Tensor views: new geometry over the same storage, never a copy (except reshape/flatten,
// which copy only when no view can express the result, as in PyTorch).
#include <algorithm>
#include <optional>

#include "mixprec/core/tensor.h"

namespace mixprec {

namespace {

// Resolves a single -1 in `shape` so the product equals `numel`.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1;
  std::optional<std::size_t> inferred;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MIXPREC_CHECK(!inferred, "[", op, "] only one dimension can be inferred (-1), got ",
                    shape_to_string(shape));
      inferred = i;
    } else {
      MIXPREC_CHECK(shape[i] >= 0, "[", op, "] invalid size ", shape[i], " at dim ", i,
                    " of shape ", shape_to_string(shape), " (sizes must be >= 0, or -1 to infer)");
      known *= shape[i];
    }
  }
  if (inferred) {
    MIXPREC_CHECK(known != 0, "[", op, "] shape ", shape_to_string(shape),
                  " is ambiguous for a tensor of ", numel, " elements (-1 next to a 0 size)");
    MIXPREC_CHECK(numel % known == 0, "[", op, "] shape ", shape_to_string(shape),
                  " is invalid for a tensor of ", numel, " elements");
    out[*inferred] = numel / known;
  } else {
    MIXPREC_CHECK(known == numel, "[", op, "] shape ", shape_to_string(shape),
                  " is invalid for a tensor of ", numel, " elements");
  }
  return out;
}

// Strides that let `new_shape` address the same elements as (old_shape, old_strides), or
// nullopt when some group of new dims would span old dims that are not laid out one after
// the other in memory. Works chunk by chunk: a chunk is a maximal run of old dims that is
// contiguous within itself; the new dims consuming exactly that chunk's elements get strides
// counting up from the chunk's innermost stride.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& new_shape, int64_t numel) {
  if (numel == 0) return contiguous_strides(new_shape);         // no element to address
  if (old_shape.empty()) return contiguous_strides(new_shape);  // 0-d: all new sizes are 1
  Strides new_strides(new_shape.size());
  auto view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t chunk_numel = 1;
  int64_t view_numel = 1;
  for (auto d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    chunk_numel *= old_shape[d];
    const bool chunk_ends =
        d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != chunk_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = old_strides[d - 1];
      chunk_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

}  // namespace

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  check_defined("slice");
  const int64_t d = normalize_dim(dim, this->dim(), "slice");
  MIXPREC_CHECK(step > 0, "[slice] step must be positive, got ", step);
  const int64_t size = shape_[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  // An empty slice keeps the offset in range so the view stays valid to take more views of.
  const int64_t offset = shape[d] == 0 ? offset_ : offset_ + start * strides_[d];
  return make_view(std::move(shape), std::move(strides), offset);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  check_defined("select");
  const int64_t d = normalize_dim(dim, this->dim(), "select");
  const int64_t size = shape_[d];
  MIXPREC_CHECK(index >= -size && index < size, "[select] index ", index,
                " is out of range for dim ", d, " of size ", size, " (shape ",
                shape_to_string(shape_), ")");
  if (index < 0) index += size;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(std::move(shape), std::move(strides), offset_ + index * strides_[d]);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined("narrow");
  const int64_t d = normalize_dim(dim, this->dim(), "narrow");
  const int64_t size = shape_[d];
  MIXPREC_CHECK(start >= -size && start <= size, "[narrow] start ", start,
                " is out of range for dim ", d, " of size ", size, " (shape ",
                shape_to_string(shape_), ")");
  if (start < 0) start += size;
  MIXPREC_CHECK(length >= 0 && start + length <= size, "[narrow] start ", start, " + length ",
                length, " does not fit in dim ", d, " of size ", size, " (shape ",
                shape_to_string(shape_), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check_defined("transpose");
  const int64_t a = normalize_dim(dim0, dim(), "transpose");
  const int64_t b = normalize_dim(dim1, dim(), "transpose");
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return make_view(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::t() const {
  check_defined("t");
  MIXPREC_CHECK(dim() <= 2, "[t] expects a tensor with at most 2 dims, got shape ",
                shape_to_string(shape_), "; use transpose(dim0, dim1) or permute()");
  return dim() < 2 ? make_view(shape_, strides_, offset_) : transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  check_defined("permute");
  const int64_t n = dim();
  auto fail = [&] {
    return detail::concat("[permute] expected a permutation of 0..", n - 1, ", got ",
                          shape_to_string(dims), " (tensor shape ", shape_to_string(shape_), ")");
  };
  MIXPREC_CHECK(static_cast<int64_t>(dims.size()) == n, fail());
  std::vector<bool> seen(n, false);
  Shape shape(n);
  Strides strides(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + n : dims[i];
    MIXPREC_CHECK(d >= 0 && d < n && !seen[d], fail());
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  return make_view(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  const int64_t n = numel();
  Shape target = infer_shape(shape, n, "view");
  std::optional<Strides> strides = view_strides(shape_, strides_, target, n);
  MIXPREC_CHECK(strides.has_value(), "[view] cannot view a tensor of shape ",
                shape_to_string(shape_), " with strides ", shape_to_string(strides_), " as ",
                shape_to_string(target), ": that would merge or split dims that are not ",
                "adjacent in memory; use reshape() (copies when needed) or contiguous() first");
  return make_view(std::move(target), std::move(*strides), offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  const int64_t n = numel();
  Shape target = infer_shape(shape, n, "reshape");
  if (std::optional<Strides> strides = view_strides(shape_, strides_, target, n))
    return make_view(std::move(target), std::move(*strides), offset_);
  Tensor copy = contiguous();
  return copy.make_view(target, contiguous_strides(target), 0);
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  const auto n_new = static_cast<int64_t>(shape.size());
  const int64_t n_old = dim();
  MIXPREC_CHECK(n_new >= n_old, "[expand] cannot expand shape ", shape_to_string(shape_), " to ",
                shape_to_string(shape), ": the target has fewer dims (", n_new,
                ") than the tensor (", n_old, ")");
  const int64_t lead = n_new - n_old;  // new leading dims
  Shape out_shape(n_new);
  Strides out_strides(n_new);
  for (int64_t i = 0; i < n_new; ++i) {
    const int64_t target = shape[i];
    if (i < lead) {
      MIXPREC_CHECK(target >= 0, "[expand] size ", target, " at new leading dim ", i, " of ",
                    shape_to_string(shape), " must be >= 0 (-1 only keeps an existing size)");
      out_shape[i] = target;
      out_strides[i] = 0;
      continue;
    }
    const int64_t old = shape_[i - lead];
    if (target == -1 || target == old) {
      out_shape[i] = old;
      out_strides[i] = strides_[i - lead];
    } else {
      MIXPREC_CHECK(old == 1 && target >= 0, "[expand] cannot expand shape ",
                    shape_to_string(shape_), " to ", shape_to_string(shape), ": size ", target,
                    " at dim ", i, " must match the existing size ", old,
                    " (only size-1 dims broadcast)");
      out_shape[i] = target;
      out_strides[i] = 0;
    }
  }
  shape_numel(out_shape, "expand");  // rejects a product that overflows int64
  return make_view(std::move(out_shape), std::move(out_strides), offset_);
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  Shape shape;
  Strides strides;
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] == 1) continue;
    shape.push_back(shape_[d]);
    strides.push_back(strides_[d]);
  }
  return make_view(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::squeeze(int64_t dim) const {
  check_defined("squeeze");
  if (this->dim() == 0 && (dim == 0 || dim == -1)) return make_view(shape_, strides_, offset_);
  const int64_t d = normalize_dim(dim, this->dim(), "squeeze");
  if (shape_[d] != 1) return make_view(shape_, strides_, offset_);
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return make_view(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  check_defined("unsqueeze");
  const int64_t d = normalize_dim(dim, this->dim() + 1, "unsqueeze");
  // The stride a size-1 dim gets never matters for addressing; this choice (the stride the
  // dim would have in a contiguous tensor) keeps contiguous tensors contiguous-looking.
  const int64_t stride = d < this->dim() ? shape_[d] * strides_[d] : 1;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return make_view(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined("flatten");
  if (dim() == 0) return reshape({1});
  const int64_t s = normalize_dim(start_dim, dim(), "flatten");
  const int64_t e = normalize_dim(end_dim, dim(), "flatten");
  MIXPREC_CHECK(s <= e, "[flatten] start_dim ", start_dim, " must not come after end_dim ", end_dim,
                " (shape ", shape_to_string(shape_), ")");
  if (s == e) return make_view(shape_, strides_, offset_);
  Shape shape(shape_.begin(), shape_.begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= shape_[d];
  shape.push_back(merged);
  shape.insert(shape.end(), shape_.begin() + e + 1, shape_.end());
  return reshape(shape);
}

}  // namespace mixprec
