#include "mixprec/core/shape.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <sstream>

#include "mixprec/core/error.h"

namespace mixprec {

std::string_view memory_format_name(MemoryFormat format) {
  // In MemoryFormat order.
  static constexpr std::string_view kNames[] = {"contiguous", "channels_last", "preserve"};
  MIXPREC_ASSERT(static_cast<std::size_t>(format) < std::size(kNames) && "unknown MemoryFormat");
  return kNames[static_cast<std::size_t>(format)];
}

std::string shape_to_string(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape, std::string_view op) {
  int64_t n = 1;
  for (int64_t size : shape) {
    MIXPREC_CHECK(size >= 0, "[", op, "] negative dimension ", size, " in shape ",
                  shape_to_string(shape));
    MIXPREC_CHECK(!__builtin_mul_overflow(n, size, &n), "[", op, "] shape ", shape_to_string(shape),
                  " has more elements than int64 can count");
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t running = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

Strides channels_last_strides(const Shape& shape) {
  MIXPREC_CHECK(shape.size() == 4, "[channels_last] expected a 4-D NCHW shape, got ",
                shape_to_string(shape));
  const int64_t c = std::max<int64_t>(shape[1], 1);
  const int64_t h = std::max<int64_t>(shape[2], 1);
  const int64_t w = std::max<int64_t>(shape[3], 1);
  return {h * w * c, 1, w * c, c};
}

Strides strides_for(const Shape& shape, MemoryFormat format, std::string_view op) {
  switch (format) {
    case MemoryFormat::Contiguous:
      return contiguous_strides(shape);
    case MemoryFormat::ChannelsLast:
      MIXPREC_CHECK(shape.size() == 4, "[", op, "] channels_last needs a 4-D NCHW shape, got ",
                    shape_to_string(shape));
      return channels_last_strides(shape);
    case MemoryFormat::Preserve:
      break;
  }
  throw Error(detail::concat("[", op, "] memory format 'preserve' needs a source tensor; use ",
                             "contiguous or channels_last"));
}

namespace {

bool has_zero_size(const Shape& shape) {
  return std::find(shape.begin(), shape.end(), 0) != shape.end();
}

// Walks dims in `order` (fastest first) checking each non-singleton stride equals the number
// of elements laid out before it.
bool dense_in_order(const Shape& shape, const Strides& strides, const std::vector<int>& order) {
  int64_t expected = 1;
  for (int d : order) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

}  // namespace

bool is_contiguous_layout(const Shape& shape, const Strides& strides) {
  MIXPREC_ASSERT(shape.size() == strides.size());
  if (has_zero_size(shape)) return true;
  std::vector<int> order(shape.size());
  std::iota(order.rbegin(), order.rend(), 0);  // last dim fastest
  return dense_in_order(shape, strides, order);
}

bool is_channels_last_layout(const Shape& shape, const Strides& strides) {
  MIXPREC_ASSERT(shape.size() == strides.size());
  if (shape.size() != 4) return false;
  if (has_zero_size(shape)) return true;
  return dense_in_order(shape, strides, {1, 3, 2, 0});  // C fastest, then W, H, N
}

int64_t channel_slice_pixel_stride(const Shape& shape, const Strides& strides) {
  MIXPREC_ASSERT(shape.size() == strides.size());
  if (shape.size() != 4) return 0;
  const int64_t p = strides[3];
  const bool slice = strides[1] == 1 && p >= shape[1] && strides[2] == p * shape[3] &&
                     strides[0] == p * shape[2] * shape[3];
  return slice ? p : 0;
}

bool is_non_overlapping_and_dense(const Shape& shape, const Strides& strides) {
  MIXPREC_ASSERT(shape.size() == strides.size());
  if (has_zero_size(shape)) return true;
  std::vector<int> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  // Fastest dim first; size-1 dims land anywhere since dense_in_order skips them.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return strides[a] < strides[b]; });
  return dense_in_order(shape, strides, order);
}

int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op) {
  MIXPREC_CHECK(ndim > 0, "[", op, "] dim ", dim, " is out of range for a 0-d tensor");
  MIXPREC_CHECK(dim >= -ndim && dim < ndim, "[", op, "] dim ", dim,
                " is out of range for a tensor of ", ndim, " dims (expected ", -ndim, "..",
                ndim - 1, ")");
  return dim < 0 ? dim + ndim : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Aligned from the right; a missing leading dim acts as size 1.
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MIXPREC_CHECK(sa == sb || sa == 1 || sb == 1, "[", op, "] shapes ", shape_to_string(a), " and ",
                  shape_to_string(b), " cannot be broadcast: sizes ", sa, " and ", sb, " at dim ",
                  i, " differ and neither is 1");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace mixprec
