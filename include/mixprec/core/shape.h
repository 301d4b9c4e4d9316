#pragma once
// Shapes, strides and memory formats: the integer bookkeeping under Tensor, kept apart so ops
// can reason about layouts without a tensor in hand.
//
// Sizes and strides are counted in elements (not bytes), as in PyTorch. A shape is a plain
// std::vector so callers can write {B, T, C} anywhere a shape is expected.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mixprec {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // element strides, one per dim

// How a dense tensor lays its elements out.
//   Contiguous    row-major: the last dim varies fastest.
//   ChannelsLast  a logical NCHW 4-D tensor stored as NHWC (C varies fastest), as PyTorch's
//                 torch.channels_last: strides [H*W*C, 1, W*C, C].
//   Preserve      keep the source's layout when it is dense (clone, to(DType)); otherwise
//                 fall back to the format suggest_memory_format() picks.
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, Preserve };

std::string_view memory_format_name(MemoryFormat format);

// "[2, 3, 4]"; the form every error message uses.
std::string shape_to_string(const std::vector<int64_t>& dims);

// Product of the sizes (1 for a 0-d shape). Throws Error naming `op` for a negative size or a
// product that overflows int64.
int64_t shape_numel(const Shape& shape, std::string_view op = "shape");

// Row-major strides: [4, 5] -> [5, 1]. Size-0 and size-1 dims get the stride they would have
// if they were size 1, so the result is well defined for empty tensors too.
Strides contiguous_strides(const Shape& shape);

// NHWC strides for a 4-D NCHW shape: [2, 3, 4, 5] -> [60, 1, 15, 3]. Throws for dim != 4.
Strides channels_last_strides(const Shape& shape);

// Strides for `format` (Preserve is rejected: it needs a source tensor).
Strides strides_for(const Shape& shape, MemoryFormat format, std::string_view op);

// Layout predicates. Size-1 dims are ignored (their stride never matters) and a tensor with
// no elements is contiguous in every format, as in PyTorch.
bool is_contiguous_layout(const Shape& shape, const Strides& strides);
bool is_channels_last_layout(const Shape& shape, const Strides& strides);
// The pixel stride P of a channel slice of a channels_last tensor: a 4-D shape [N, C, H, W] with
// strides exactly [P*H*W, 1, P*W, P], P >= C (P = C: a whole one); 0 for any other layout.
int64_t channel_slice_pixel_stride(const Shape& shape, const Strides& strides);

// True when the elements tile a block of exactly numel slots with no gaps and no two indices
// mapping to the same slot, in some dim order (e.g. any permutation of a contiguous tensor).
bool is_non_overlapping_and_dense(const Shape& shape, const Strides& strides);

// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);

// The shape both operands broadcast to (NumPy/PyTorch rules: align trailing dims; each pair
// must match or one must be 1). Throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op = "broadcast");

}  // namespace mixprec
