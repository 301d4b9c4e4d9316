// Copies between arbitrary strided layouts and dtypes. Every copy (copy_, contiguous, to,
// clone, fill_) goes through one N-d strided walk that hands the innermost dimension to the
// conversion kernel, so layout handling lives in exactly one place and conversions follow the
// kernel's rounding rules on every path.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "mixprec/core/parallel.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/convert.h"

namespace mixprec {

namespace {

// Elements per parallel chunk: below this a thread costs more than the copy it would take.
constexpr int64_t kParallelGrain = int64_t{1} << 15;

// The walk's geometry after simplification, outermost dim first. shape.size() may be 0 (one
// element). Strides are in elements of each side's own dtype.
struct WalkPlan {
  Shape shape;
  Strides dst;
  Strides src;
};

// Drops size-1 dims, orders the rest by destination stride (largest outermost, so writes move
// forward through memory), then merges neighbours that are one flat run on both sides:
// a contiguous [64, 32, 16] copy becomes a single row of 32768.
WalkPlan plan_walk(const Shape& shape, const Strides& dst, const Strides& src) {
  std::vector<std::size_t> dims;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](std::size_t a, std::size_t b) {
    if (dst[a] != dst[b]) return dst[a] > dst[b];
    return src[a] > src[b];
  });
  WalkPlan plan;
  for (std::size_t d : dims) {
    if (!plan.shape.empty()) {
      const std::size_t last = plan.shape.size() - 1;
      if (plan.dst[last] == dst[d] * shape[d] && plan.src[last] == src[d] * shape[d]) {
        plan.shape[last] *= shape[d];
        plan.dst[last] = dst[d];
        plan.src[last] = src[d];
        continue;
      }
    }
    plan.shape.push_back(shape[d]);
    plan.dst.push_back(dst[d]);
    plan.src.push_back(src[d]);
  }
  return plan;
}

// dst[i] = convert(src[i]) for every index i of `shape`. dst_base/src_base point at element 0
// of each side. The sides must not overlap in memory (copy_ makes sure of it).
void strided_convert(const Shape& shape, void* dst_base, DType dst_type, const Strides& dst_strides,
                     const void* src_base, DType src_type, const Strides& src_strides) {
  const WalkPlan plan = plan_walk(shape, dst_strides, src_strides);
  auto* dst = static_cast<char*>(dst_base);
  const auto* src = static_cast<const char*>(src_base);
  if (plan.shape.empty()) {
    kernels::convert(src, src_type, dst, dst_type, 1);
    return;
  }
  const auto dst_size = static_cast<int64_t>(dtype_size(dst_type));
  const auto src_size = static_cast<int64_t>(dtype_size(src_type));
  const std::size_t outer_dims = plan.shape.size() - 1;
  const int64_t row_len = plan.shape.back();
  const int64_t row_dst_stride = plan.dst.back();
  const int64_t row_src_stride = plan.src.back();
  const int64_t rows = std::accumulate(plan.shape.begin(), plan.shape.end() - 1, int64_t{1},
                                       std::multiplies<>());

  auto copy_rows = [&](int64_t first_row, int64_t end_row) {
    // Odometer over the outer dims, started at first_row.
    std::vector<int64_t> index(outer_dims);  // (outer_dims)
    int64_t dst_off = 0, src_off = 0;         // in elements
    for (int64_t rest = first_row, d = static_cast<int64_t>(outer_dims) - 1; d >= 0; --d) {
      index[d] = rest % plan.shape[d];
      rest /= plan.shape[d];
      dst_off += index[d] * plan.dst[d];
      src_off += index[d] * plan.src[d];
    }
    for (int64_t row = first_row; row < end_row; ++row) {
      char* d = dst + dst_off * dst_size;
      const char* s = src + src_off * src_size;
      if (row_dst_stride == 1 && row_src_stride == 1)
        kernels::convert(s, src_type, d, dst_type, static_cast<std::size_t>(row_len));
      else
        kernels::convert_strided(s, src_type, row_src_stride, d, dst_type, row_dst_stride,
                                 static_cast<std::size_t>(row_len));
      for (auto k = static_cast<int64_t>(outer_dims) - 1; k >= 0; --k) {
        dst_off += plan.dst[k];
        src_off += plan.src[k];
        if (++index[k] < plan.shape[k]) break;
        dst_off -= plan.dst[k] * plan.shape[k];
        src_off -= plan.src[k] * plan.shape[k];
        index[k] = 0;
      }
    }
  };
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / row_len), copy_rows);
}

// [first, last) byte range a tensor's elements touch within its storage (empty when numel 0).
std::pair<int64_t, int64_t> byte_extent(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto size = static_cast<int64_t>(t.element_size());
  return {t.storage_offset() * size, (last + 1) * size};
}

bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.shares_storage(b)) return false;
  const auto [a_lo, a_hi] = byte_extent(a);
  const auto [b_lo, b_hi] = byte_extent(b);
  return a_lo < b_hi && b_lo < a_hi;
}

}  // namespace

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_defined("copy_");
  MIXPREC_CHECK(src.defined(), "[copy_] the source tensor is undefined (default-constructed)");
  for (int64_t d = 0; d < dim(); ++d)
    MIXPREC_CHECK(shape_[d] <= 1 || strides_[d] != 0, "[copy_] cannot write into a tensor of shape ",
                  shape_to_string(shape_), " with strides ", shape_to_string(strides_),
                  ": stride 0 at dim ", d, " makes several elements share one memory location "
                  "(an expand() result?); clone() it first");
  // Broadcast check with copy_'s own message; expand() below then cannot fail.
  const int64_t lead = dim() - src.dim();
  bool broadcastable = lead >= 0;
  for (int64_t d = 0; broadcastable && d < src.dim(); ++d)
    broadcastable = src.shape_[d] == 1 || src.shape_[d] == shape_[lead + d];
  MIXPREC_CHECK(broadcastable, "[copy_] source shape ", shape_to_string(src.shape_),
                " cannot be broadcast to the destination shape ", shape_to_string(shape_));
  if (numel() == 0) return *this;

  Tensor source = src;
  if (may_overlap(*this, src)) {
    if (src.dtype_ == dtype_ && src.offset_ == offset_ && src.shape_ == shape_ &&
        src.strides_ == strides_)
      return *this;  // copying a tensor onto itself
    source = src.clone(MemoryFormat::Contiguous);  // read everything before writing anything
  }
  source = source.expand(shape_);
  strided_convert(shape_, data_ptr(), dtype_, strides_, source.data_ptr(), source.dtype_,
                  source.strides_);
  return *this;
}

const Tensor& Tensor::fill_(double value) const {
  check_defined("fill_");
  return copy_(scalar(value, dtype_));
}

const Tensor& Tensor::zero_() const {
  check_defined("zero_");
  // Zero is all-zero bits in every dtype, and a dense tensor's elements form one block that
  // starts at data_ptr() (strides are never negative).
  if (is_non_overlapping_and_dense()) {
    if (numel() > 0) std::memset(data_ptr(), 0, nbytes());
    return *this;
  }
  return fill_(0.0);
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  check_defined("contiguous");
  MIXPREC_CHECK(format != MemoryFormat::Preserve,
                "[contiguous] memory format 'preserve' is not a layout; use contiguous or "
                "channels_last");
  if (is_contiguous(format)) return *this;
  Tensor out = empty(shape_, dtype_, format);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  Tensor out = empty_like(*this, dtype, MemoryFormat::Preserve);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(MemoryFormat format) const {
  check_defined("to");
  if (format == MemoryFormat::Preserve) return *this;
  return contiguous(format);
}

Tensor Tensor::clone(MemoryFormat format) const {
  check_defined("clone");
  Tensor out = empty_like(*this, format);
  out.copy_(*this);
  return out;
}

}  // namespace mixprec
