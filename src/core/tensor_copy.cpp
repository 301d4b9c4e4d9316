// Copies between arbitrary strided layouts and dtypes. Every copy (copy_, contiguous, to,
// clone, fill_) goes through one N-d strided walk (strided_convert): it simplifies the
// geometry, iterates the outer dims and hands runs along the inner dim to the conversion
// kernel, so layout handling lives in exactly one place and conversions follow the kernel's
// rounding rules on every path.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "mixprec/core/capture.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/convert.h"

namespace mixprec {

namespace {

// Elements per parallel chunk: below this a thread costs more than the copy it would take.
constexpr int64_t kParallelGrain = int64_t{1} << 15;
// Edge of the square block a transposing copy works through at a time: 32 x 32 elements of
// each side (at most 8 KiB each for f64) stay in L1 while the block is done.
constexpr int64_t kTile = 32;

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

template <typename Bits>
void move_elements(const char* src, int64_t src_stride, char* dst, int64_t dst_stride, int64_t n) {
  for (int64_t k = 0; k < n; ++k)  // memcpy of one element: no aliasing questions, one mov
    std::memcpy(dst + k * dst_stride * int64_t{sizeof(Bits)},
                src + k * src_stride * int64_t{sizeof(Bits)}, sizeof(Bits));
}

// One run of n elements. Same-dtype strided runs are pure data movement, done here: short
// runs are common in transposing copies and a kernel call per run would cost more than the
// run itself. Everything else is the conversion kernel's.
void convert_run(const char* src, DType src_type, int64_t src_stride, char* dst, DType dst_type,
                 int64_t dst_stride, int64_t n) {
  if (src_type == dst_type && (src_stride != 1 || dst_stride != 1)) {
    switch (dtype_size(src_type)) {
      case 1:
        return move_elements<uint8_t>(src, src_stride, dst, dst_stride, n);
      case 2:
        return move_elements<uint16_t>(src, src_stride, dst, dst_stride, n);
      case 4:
        return move_elements<uint32_t>(src, src_stride, dst, dst_stride, n);
      case 8:
        return move_elements<uint64_t>(src, src_stride, dst, dst_stride, n);
      default:
        MIXPREC_ASSERT(false && "unexpected element size");
    }
  }
  if (src_stride == 1 && dst_stride == 1)
    kernels::convert(src, src_type, dst, dst_type, static_cast<std::size_t>(n));
  else
    kernels::convert_strided(src, src_type, src_stride, dst, dst_type, dst_stride,
                             static_cast<std::size_t>(n));
}

// A transposing copy: the destination's fastest dim `fast_dst` (the plan's last) is not the
// source's fastest dim `fast_src`. Walking rows would read one element per cache line; going
// block by block over the (fast_src, fast_dst) plane keeps both sides of a block in cache.
// Inside a block the kernel runs along whichever of the two dims is longer there, so a copy
// like NCHW -> NHWC with 3 channels makes calls of 32 elements, not 3.
void tiled_convert(const WalkPlan& plan, std::size_t fast_src, char* dst, DType dst_type,
                   const char* src, DType src_type) {
  const std::size_t fast_dst = plan.shape.size() - 1;
  Shape outer_shape;  // every other dim, outermost first
  Strides outer_dst, outer_src;
  for (std::size_t d = 0; d < fast_dst; ++d) {
    if (d == fast_src) continue;
    outer_shape.push_back(plan.shape[d]);
    outer_dst.push_back(plan.dst[d]);
    outer_src.push_back(plan.src[d]);
  }
  const int64_t n_j = plan.shape[fast_src], n_i = plan.shape[fast_dst];
  const int64_t dj = plan.dst[fast_src], sj = plan.src[fast_src];  // sj == 1
  const int64_t di = plan.dst[fast_dst], si = plan.src[fast_dst];  // di == 1
  const int64_t tiles_j = (n_j + kTile - 1) / kTile;
  const auto dst_size = static_cast<int64_t>(dtype_size(dst_type));
  const auto src_size = static_cast<int64_t>(dtype_size(src_type));
  const int64_t outer =
      std::accumulate(outer_shape.begin(), outer_shape.end(), int64_t{1}, std::multiplies<>());
  // One unit of work: one outer index and one band of kTile rows along fast_src.
  auto run_units = [&](int64_t first, int64_t end) {
    for (int64_t unit = first; unit < end; ++unit) {
      int64_t dst_off = 0, src_off = 0;  // in elements
      for (int64_t rest = unit / tiles_j, d = static_cast<int64_t>(outer_shape.size()) - 1; d >= 0;
           --d) {
        const int64_t index = rest % outer_shape[d];
        rest /= outer_shape[d];
        dst_off += index * outer_dst[d];
        src_off += index * outer_src[d];
      }
      const int64_t j0 = unit % tiles_j * kTile, j1 = std::min(n_j, j0 + kTile);
      for (int64_t i0 = 0; i0 < n_i; i0 += kTile) {
        const int64_t i1 = std::min(n_i, i0 + kTile);
        // Addresses of element (j, i) of this unit on each side.
        auto src_at = [&](int64_t j, int64_t i) {
          return src + (src_off + j * sj + i * si) * src_size;
        };
        auto dst_at = [&](int64_t j, int64_t i) {
          return dst + (dst_off + j * dj + i * di) * dst_size;
        };
        if (i1 - i0 >= j1 - j0) {
          for (int64_t j = j0; j < j1; ++j)
            convert_run(src_at(j, i0), src_type, si, dst_at(j, i0), dst_type, di, i1 - i0);
        } else {
          for (int64_t i = i0; i < i1; ++i)
            convert_run(src_at(j0, i), src_type, sj, dst_at(j0, i), dst_type, dj, j1 - j0);
        }
      }
    }
  };
  const int64_t unit_elems = std::min(n_j, kTile) * n_i;
  parallel_for(0, outer * tiles_j, std::max<int64_t>(1, kParallelGrain / unit_elems), run_units);
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
  if (plan.dst.back() == 1 && plan.src.back() > 1) {  // (a stride-0 source needs no tiling)
    for (std::size_t d = 0; d + 1 < plan.shape.size(); ++d)
      if (plan.src[d] == 1) {
        tiled_convert(plan, d, dst, dst_type, src, src_type);
        return;
      }
  }
  const std::size_t outer_dims = plan.shape.size() - 1;
  const int64_t row_len = plan.shape.back();
  const int64_t row_dst_stride = plan.dst.back();
  const int64_t row_src_stride = plan.src.back();
  const int64_t rows =
      std::accumulate(plan.shape.begin(), plan.shape.end() - 1, int64_t{1}, std::multiplies<>());

  auto copy_rows = [&](int64_t first_row, int64_t end_row) {
    // Odometer over the outer dims, started at first_row.
    std::vector<int64_t> index(outer_dims);  // (outer_dims)
    int64_t dst_off = 0, src_off = 0;        // in elements
    for (int64_t rest = first_row, d = static_cast<int64_t>(outer_dims) - 1; d >= 0; --d) {
      index[d] = rest % plan.shape[d];
      rest /= plan.shape[d];
      dst_off += index[d] * plan.dst[d];
      src_off += index[d] * plan.src[d];
    }
    for (int64_t row = first_row; row < end_row; ++row) {
      char* d = dst + dst_off * dst_size;
      const char* s = src + src_off * src_size;
      convert_run(s, src_type, row_src_stride, d, dst_type, row_dst_stride, row_len);
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
    MIXPREC_CHECK(shape_[d] <= 1 || strides_[d] != 0,
                  "[copy_] cannot write into a tensor of shape ", shape_to_string(shape_),
                  " with strides ", shape_to_string(strides_), ": stride 0 at dim ", d,
                  " makes several elements share one memory location "
                  "(an expand() result?); clone() it first");
  // Broadcast check with copy_'s own message; expand() below then cannot fail.
  const int64_t lead = dim() - src.dim();
  bool broadcastable = lead >= 0;
  for (int64_t d = 0; broadcastable && d < src.dim(); ++d)
    broadcastable = src.shape_[d] == 1 || src.shape_[d] == shape_[lead + d];
  MIXPREC_CHECK(broadcastable, "[copy_] source shape ", shape_to_string(src.shape_),
                " cannot be broadcast to the destination shape ", shape_to_string(shape_));
  if (numel() == 0) return *this;
  storage_->bump_version();

  Tensor source = src;
  if (may_overlap(*this, src)) {
    if (src.dtype_ == dtype_ && src.offset_ == offset_ && src.shape_ == shape_ &&
        src.strides_ == strides_)
      return *this;                                // copying a tensor onto itself
    source = src.clone(MemoryFormat::Contiguous);  // read everything before writing anything
  }
  source = source.expand(shape_);
  // Elementwise for a graph's memory plan: a copy of a tensor that dies there (a gradient
  // cloned into .grad, say) may take its place, which makes the replayed copy a no-op.
  capture::launch(
      "copy", {&source}, {this},
      [](const capture::KernelArgs& a) {
        const Tensor &src = a.in(0), &dst = a.out(0);
        if (src.data_ptr() == dst.data_ptr() && src.dtype() == dst.dtype() &&
            src.strides() == dst.strides())
          return;  // onto itself
        strided_convert(dst.shape(), dst.data_ptr(), dst.dtype(), dst.strides(), src.data_ptr(),
                        src.dtype(), src.strides());
      },
      capture::Aliasing::Elementwise);
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
    storage_->bump_version();
    if (numel() > 0)
      capture::launch("zero", {}, {this}, [](const capture::KernelArgs& a) {
        std::memset(a.out(0).data_ptr(), 0, a.out(0).nbytes());
      });
    return *this;
  }
  return fill_(0.0);
}

namespace {
// Tells autograd that `copy` holds `source`'s values (to, contiguous, clone are differentiable).
void record_copy(const Tensor& source, const Tensor& copy) {
  if (source.autograd_meta() != nullptr && detail::autograd_hooks().record_copy != nullptr)
    detail::autograd_hooks().record_copy(source, copy);
}
}  // namespace

Tensor Tensor::contiguous(MemoryFormat format) const {
  check_defined("contiguous");
  MIXPREC_CHECK(format != MemoryFormat::Preserve,
                "[contiguous] memory format 'preserve' is not a layout; use contiguous or "
                "channels_last");
  if (is_contiguous(format)) return *this;
  Tensor out = empty(shape_, dtype_, format);
  out.copy_(*this);
  record_copy(*this, out);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  Tensor out = empty_like(*this, dtype, MemoryFormat::Preserve);
  out.copy_(*this);
  record_copy(*this, out);
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
  record_copy(*this, out);
  return out;
}

}  // namespace mixprec
