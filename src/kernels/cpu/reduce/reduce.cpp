// Reduction entry points: checks, the [outer, len, inner] plan, the split over threads; the
// per-level kernels (reduce_impl.h) reduce whole lines.
//
// Plan: the reduced dims (size-1 dims aside) of a contiguous x that form one consecutive
// block give x[outer][len][inner] directly; reduced dims that are not consecutive are first
// permuted behind the kept ones and copied, giving x[outer][len][1]. A single long line (a
// full reduction) is split over the threads, each summing a chunk pairwise; the chunk
// results are combined in f64.
#include "mixprec/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../elementwise/elementwise_frontend.h"
#include "../isa/family_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/parallel.h"
#include "reduce_kernels.h"

namespace mixprec::kernels {
namespace {

using reduce_detail::PartialKind;
using reduce_detail::ReduceKernels;
using reduce_detail::ReduceKind;
using reduce_detail::ReducePlan;

constexpr int64_t kGrainElements = int64_t{1} << 15;  // per thread chunk, at least
constexpr int64_t kSplitLength = int64_t{1} << 16;    // a lone line this long is split
constexpr int64_t kMaxLineChunks = 256;  // into len / kGrainElements chunks, at most this many

const ReduceKernels& kernels_for(bool f64) {
  using namespace reduce_detail;
  return family_kernels<ReduceKernels, reduce_scalar, reduce_avx2, reduce_avx512, reduce_f64>(f64);
}

// reduced[d] for each dim of `shape`; an empty `dims` reduces them all.
std::vector<bool> reduced_dims(const Shape& shape, const std::vector<int64_t>& dims,
                               const char* op) {
  const auto ndim = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (int64_t d : dims) {
    // A 0-d tensor accepts dim 0 and -1, as PyTorch, and has nothing to reduce.
    const int64_t nd = normalize_dim(d, std::max<int64_t>(ndim, 1), op);
    if (ndim == 0) continue;
    MIXPREC_CHECK(!reduced[static_cast<std::size_t>(nd)], "[", op, "] dim ", d,
                  " appears twice in dims ", shape_to_string(dims));
    reduced[static_cast<std::size_t>(nd)] = true;
  }
  return reduced;
}

// The combined result of one long line split into chunks. Their number depends on the length
// only, never on the threads, so the f64 partial sums add up the same way on any machine.
double split_line(const ReduceKernels& k, const ReducePlan& p) {
  const int64_t chunks = std::clamp<int64_t>(p.len / kGrainElements, 1, kMaxLineChunks);
  std::vector<double> partial(static_cast<std::size_t>(chunks));
  const char* x = static_cast<const char*>(p.x);
  const auto elem = static_cast<int64_t>(dtype_size(p.x_dtype));
  auto run = [&](PartialKind kind, double center) {
    parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t begin = p.len * c / chunks, end = p.len * (c + 1) / chunks;
        partial[static_cast<std::size_t>(c)] =
            k.partial(kind, x + begin * elem, p.x_dtype, end - begin, center);
      }
    });
  };
  auto total = [&] {
    double s = 0.0;
    for (double v : partial) s += v;
    return s;
  };
  const auto len = static_cast<double>(p.len);
  switch (p.kind) {
    case ReduceKind::Sum:
      run(PartialKind::Sum, 0.0);
      return total();
    case ReduceKind::Mean:
      run(PartialKind::Sum, 0.0);
      return total() / len;
    case ReduceKind::Max:
    case ReduceKind::Min: {
      const bool is_max = p.kind == ReduceKind::Max;
      run(is_max ? PartialKind::Max : PartialKind::Min, 0.0);
      double best = partial[0];
      for (double v : partial) {
        if (std::isnan(v)) return v;
        best = is_max ? std::max(best, v) : std::min(best, v);
      }
      return best;
    }
    case ReduceKind::Var: {
      run(PartialKind::Sum, 0.0);
      run(PartialKind::SquaredDeviation, total() / len);
      return total() / std::max(0.0, len - p.correction);
    }
  }
  return 0.0;
}

void reduce(ReduceKind kind, const char* op, const Tensor& x, const std::vector<int64_t>& dims,
            bool keepdim, const Tensor& out, double correction) {
  frontend::check_floating(x, op, "x");
  frontend::check_floating(out, op, "out");
  const std::vector<bool> reduced = reduced_dims(x.shape(), dims, op);
  frontend::check_shape(out, reduced_shape(x.shape(), dims, keepdim, op), op, "out",
                        detail::concat("x ", shape_to_string(x.shape()), " reduced over dims ",
                                       dims.empty() ? "(all)" : shape_to_string(dims),
                                       keepdim ? " with keepdim" : ""));
  if (kind == ReduceKind::Max || kind == ReduceKind::Min)
    for (std::size_t d = 0; d < reduced.size(); ++d)
      MIXPREC_CHECK(!reduced[d] || x.shape()[d] != 0, "[", op, "] cannot reduce over dim ", d,
                    " of x ", shape_to_string(x.shape()), ": it has no elements and ", op,
                    " has no identity");
  if (out.numel() == 0) return;

  Tensor xc = frontend::staged_input(x, out);
  int64_t outer = 1, len = 1, inner = 1;
  enum { kBefore, kInside, kAfter } where = kBefore;
  bool one_block = true;
  for (std::size_t d = 0; d < reduced.size(); ++d) {
    const int64_t size = xc.shape()[d];
    if (size == 1) continue;
    if (reduced[d]) {
      one_block &= where != kAfter;
      where = kInside;
      len *= size;
    } else if (where == kBefore) {
      outer *= size;
    } else {
      where = kAfter;
      inner *= size;
    }
  }
  if (!one_block) {
    std::vector<int64_t> order;
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t d = 0; d < reduced.size(); ++d)
        if (reduced[d] == (pass == 1)) order.push_back(static_cast<int64_t>(d));
    xc = xc.permute(order).contiguous();
    outer = out.numel();
    len = x.numel() / outer;
    inner = 1;
  }

  const frontend::StagedOutput staged(out);
  const ReducePlan plan{
      kind,        xc.data_ptr(), xc.dtype(), outer, len, inner, staged.work().data_ptr(),
      out.dtype(), correction};
  const ReduceKernels& k = kernels_for(frontend::any_f64({&x, &out}));
  if (outer == 1 && inner == 1 && len >= kSplitLength) {
    staged.work().fill_(split_line(k, plan));
  } else {
    const int64_t units =
        inner == 1 ? outer : outer * ((inner + k.strip_width - 1) / k.strip_width);
    const int64_t unit_elements =
        std::max<int64_t>(1, len * std::min<int64_t>(inner, k.strip_width));
    parallel_for(0, units, std::max<int64_t>(1, kGrainElements / unit_elements),
                 [&](int64_t lo, int64_t hi) { k.lines(plan, lo, hi); });
  }
  staged.finish();
}

}  // namespace

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim,
                    const char* op) {
  const std::vector<bool> reduced = reduced_dims(shape, dims, op);
  Shape result;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d])
      result.push_back(shape[d]);
    else if (keepdim)
      result.push_back(1);
  }
  return result;
}

void sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out) {
  reduce(ReduceKind::Sum, "sum", x, dims, keepdim, out, 0.0);
}

void mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out) {
  reduce(ReduceKind::Mean, "mean", x, dims, keepdim, out, 0.0);
}

void max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out) {
  reduce(ReduceKind::Max, "max", x, dims, keepdim, out, 0.0);
}

void min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const Tensor& out) {
  reduce(ReduceKind::Min, "min", x, dims, keepdim, out, 0.0);
}

void var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim,
         const Tensor& out) {
  reduce(ReduceKind::Var, "var", x, dims, keepdim, out, unbiased ? 1.0 : 0.0);
}

}  // namespace mixprec::kernels
