#pragma once
// Argument checks and operand staging shared by the entry points of the non-GEMM kernel
// families (elementwise, reduce, softmax, norm, loss, embedding); defined in elementwise.cpp.
// Every check throws mixprec::Error with a message that starts with "[op]", names the
// argument, what it got and what was expected.
#include <initializer_list>
#include <string_view>

#include "mixprec/core/tensor.h"

namespace mixprec::kernels::frontend {

void check_defined(const Tensor& t, std::string_view op, std::string_view role);
// Defined and f32, f16, bf16 or f64.
void check_floating(const Tensor& t, std::string_view op, std::string_view role);
// "[op] <role> has shape [..], expected [..] (<why>)".
void check_shape(const Tensor& t, const Shape& expected, std::string_view op, std::string_view role,
                 std::string_view why);

// True when writing `out` could change what reading `in` returns: they share storage and are
// not the very same view (same offset, shape and strides: an in-place op, which every kernel
// here supports because each element is read before it is written).
bool overlaps(const Tensor& in, const Tensor& out);

// `in` laid out as `format` (Contiguous or ChannelsLast): itself when it already is and it does
// not overlap `out` (pass an undefined `out` when there is none), else a copy.
Tensor staged_input(const Tensor& in, const Tensor& out,
                    MemoryFormat format = MemoryFormat::Contiguous);

// Where a kernel writes: `out` itself when it is laid out as `format`, else a scratch tensor
// of the same shape and dtype that finish() copies into `out`.
class StagedOutput {
 public:
  StagedOutput(const Tensor& out, MemoryFormat format = MemoryFormat::Contiguous);
  const Tensor& work() const { return work_; }
  void finish() const;

 private:
  Tensor out_, work_;
};

// True when any of the defined tensors is f64: that call computes in f64.
bool any_f64(std::initializer_list<const Tensor*> tensors);

}  // namespace mixprec::kernels::frontend
