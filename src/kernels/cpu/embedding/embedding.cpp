// Embedding lookup: checks, then rows gathered in parallel over positions.
#include "mixprec/kernels/embedding.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../elementwise/elementwise_frontend.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"

namespace mixprec::kernels {
namespace {

constexpr int64_t kGrainElements = int64_t{1} << 14;  // per thread chunk, at least

// The multi-index of flat position p in `shape`, as "[i, j, ...]".
std::string position_of(int64_t p, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (auto d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = p % shape[static_cast<std::size_t>(d)];
    p /= shape[static_cast<std::size_t>(d)];
  }
  return shape_to_string(index);
}

}  // namespace

void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  constexpr const char* kOp = "embedding";
  frontend::check_floating(weight, kOp, "weight");
  frontend::check_defined(indices, kOp, "indices");
  frontend::check_floating(out, kOp, "out");
  MIXPREC_CHECK(weight.dim() == 2, "[embedding] weight has shape ", shape_to_string(weight.shape()),
                ", expected [V, D]");
  MIXPREC_CHECK(indices.dtype() == DType::I64 || indices.dtype() == DType::I32,
                "[embedding] indices has dtype ", dtype_name(indices.dtype()),
                ", expected i64 or i32");
  const int64_t rows = weight.size(0), dim = weight.size(1);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  frontend::check_shape(out, out_shape, kOp, "out", "indices' shape + [D]");

  const Tensor index = indices.to(DType::I64).contiguous();
  const int64_t count = index.numel();
  const int64_t* idx = count > 0 ? index.data<int64_t>() : nullptr;
  for (int64_t p = 0; p < count; ++p)
    MIXPREC_CHECK(idx[p] >= 0 && idx[p] < rows, "[embedding] index ", idx[p], " at position ",
                  position_of(p, indices.shape()), " of indices ", shape_to_string(indices.shape()),
                  " is out of range for a table of ", rows, " rows");
  if (count == 0 || dim == 0) return;

  const Tensor w = frontend::overlaps(weight, out) ? weight.clone() : weight;
  const frontend::StagedOutput staged(out);
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(staged.work().data_ptr());
  const DType from = w.dtype(), to = out.dtype();
  const auto src_elem = static_cast<int64_t>(dtype_size(from)),
             dst_elem = static_cast<int64_t>(dtype_size(to));
  const int64_t row_stride = w.stride(0), col_stride = w.stride(1);
  parallel_for(0, count, std::max<int64_t>(1, kGrainElements / dim), [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const char* row = src + idx[p] * row_stride * src_elem;
      char* target = dst + p * dim * dst_elem;
      if (col_stride == 1 && from == to)
        std::memcpy(target, row, static_cast<std::size_t>(dim * src_elem));
      else if (col_stride == 1)
        convert(row, from, target, to, static_cast<std::size_t>(dim));
      else
        convert_strided(row, from, col_stride, target, to, 1, static_cast<std::size_t>(dim));
    }
  });
  staged.finish();
}

}  // namespace mixprec::kernels
