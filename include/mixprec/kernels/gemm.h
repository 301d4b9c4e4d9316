#pragma once
// GEMM, the engine's heart: C = epilogue(alpha * op(A) * op(B) + beta * C).
//
// Inputs f32, f16 or bf16 in any combination; output f32, f16 or bf16. The compute dtype is
// bf16 (vdpbf16ps, or AMX tiles at the amx level when K is a multiple of 32 and A's rows are
// contiguous) only when both inputs are bf16 and the kernel level is avx512bf16 or above; every
// other case converts the inputs exactly to f32 while packing and runs f32 FMAs. Accumulation
// is always f32 in registers over the whole K, and the result is rounded once, on the final
// write, after the fused epilogue: bias, activation, residual add, output cast.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mixprec/core/allocator.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/dtype.h"

namespace mixprec::kernels {

enum class Activation : uint8_t { None, ReLU, GeluTanh, GeluErf, SiLU };

// A strided matrix view: element (r, c) is at data + (r * row_stride + c * col_stride).
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 1;

  // Row-major [rows, cols] with leading dimension ld (>= cols).
  static MatrixView row_major(const void* data, DType dtype, int64_t rows, int64_t cols,
                              int64_t ld) {
    return {data, dtype, rows, cols, ld, 1};
  }
  MatrixView transposed() const { return {data, dtype, cols, rows, col_stride, row_stride}; }
};

struct MutableMatrixView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0;  // columns are contiguous

  static MutableMatrixView row_major(void* data, DType dtype, int64_t rows, int64_t cols,
                                     int64_t ld) {
    return {data, dtype, rows, cols, ld};
  }
};

// What happens to each output element after the f32 accumulation, in this order:
//   v = alpha * acc + beta * C_old + bias[n];  v = act(v);  v += residual[m, n];  C = round(v)
struct GemmEpilogue {
  float alpha = 1.0f;
  float beta = 0.0f;           // 0 means C's old contents are never read (may be uninitialised)
  const void* bias = nullptr;  // [N], any float dtype
  DType bias_dtype = DType::F32;
  Activation activation = Activation::None;
  const void* residual = nullptr;  // [M, N] row-major with leading dimension residual_ld
  DType residual_dtype = DType::F32;
  int64_t residual_ld = 0;
};

// C (M x N) = epilogue(A (M x K) * B (K x N)). Transposes are expressed through the views'
// strides (MatrixView::transposed()). Throws Error on mismatched shapes or unsupported dtypes.
void gemm(const MatrixView& a, const MatrixView& b, const MutableMatrixView& c,
          const GemmEpilogue& epilogue = {});

// Whether gemm packs an A given transposed (row stride 1: the transpose of a row-major matrix)
// as fast as a row-major A at the active kernel level: bf16 x bf16 on the vdpbf16ps micro-kernel
// (the avx512bf16 level, where vdpbf16ps is not at half rate: vdpbf16ps_at_half_rate). A
// caller that can afford it transposes A into memory first elsewhere: AMX tiles read A's rows in
// place, and the other packers take a transposed A element by element.
bool gemm_packs_transposed_a(DType a, DType b);

// `batch` independent GEMMs; operand i starts at data + i * batch_stride elements.
struct BatchStrides {
  int64_t a = 0, b = 0, c = 0, residual = 0;
};
void gemm_batched(int64_t batch, const MatrixView& a, const MatrixView& b,
                  const MutableMatrixView& c, const BatchStrides& strides,
                  const GemmEpilogue& epilogue = {});

// A sub-block of a packed B: rows [k_begin, k_end) and columns [n_begin, n_end) (-1: to the
// end). Blocked algorithms (attention) pack K and V once and multiply by slices of them.
// n_begin must be a multiple of the micro-kernel's panel width (32 on AVX-512, 16 on AVX2, 8
// scalar: use a multiple of 32), k_begin even, k_end even or the last row.
struct PackedRange {
  int64_t k_begin = 0, k_end = -1;
  int64_t n_begin = 0, n_end = -1;
};

// B packed once into the micro-kernel's panel layout and compute dtype, for weights reused
// every call (inference). Packing is tied to the kernel level active when it was made;
// gemm_prepacked repacks nothing and throws if the level has changed since.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  int64_t rows() const { return k_; }
  int64_t cols() const { return n_; }
  DType compute_dtype() const { return compute_; }
  DType a_dtype() const { return a_dtype_; }  // the A dtype it was packed for
  IsaLevel level() const { return level_; }
  std::size_t bytes() const { return storage_.size(); }
  // The packed panels themselves, for kernels that walk them directly (the direct
  // convolution): panel j holds columns [j * nr, (j + 1) * nr) in the micro-kernel's layout.
  const void* panels() const { return storage_.data(); }
  int nr() const { return nr_; }                                  // columns per panel
  int k_pack() const { return compute_ == DType::BF16 ? 2 : 1; }  // k values interleaved per word
  int64_t k_padded() const { return (k_ + k_pack() - 1) / k_pack() * k_pack(); }
  // For packers outside the GEMM (allocate_packed_b): element (k, n) of B, as the compute
  // dtype, goes to panel n / nr at ((k / k_pack) * nr + n % nr) * k_pack + k % k_pack; rows
  // past k and columns past n must be zero.
  void* mutable_panels() { return storage_.data(); }

 private:
  friend void repack_b(PackedMatrix& packed, const MatrixView& b, DType a_dtype);
  friend void reserve_packed_b(PackedMatrix& packed, int64_t k, int64_t n, DType b_dtype,
                               DType a_dtype);
  friend PackedMatrix allocate_packed_b(int64_t k, int64_t n, DType b_dtype, DType a_dtype);
  friend void gemm_prepacked(const MatrixView&, const PackedMatrix&, const MutableMatrixView&,
                             const GemmEpilogue&, const PackedRange&);
  Allocation storage_;
  int64_t k_ = 0, n_ = 0;
  DType compute_ = DType::F32;
  DType a_dtype_ = DType::F32;
  IsaLevel level_ = IsaLevel::Scalar;
  int nr_ = 0;
};

// Packs B for later products with an A of dtype `a_dtype` (which decides the compute dtype).
PackedMatrix pack_b(const MatrixView& b, DType a_dtype);
// The same into `packed`, reusing its panels' memory when it is large enough: what a kernel that
// packs per call (attention's K and V) keeps per thread, so that it allocates nothing once warm.
void repack_b(PackedMatrix& packed, const MatrixView& b, DType a_dtype);
// Grows `packed`'s panel memory to what repack_b needs for a B [k, n] of dtype b_dtype and an A
// of dtype a_dtype (contents not kept): a kernel whose B grows call by call reserves the largest
// once.
void reserve_packed_b(PackedMatrix& packed, int64_t k, int64_t n, DType b_dtype, DType a_dtype);
// Uninitialised panels for B [k, n] of dtype b_dtype and A of dtype a_dtype, for a caller that
// fills them itself (see PackedMatrix::mutable_panels). As pack_b would make them, except that
// a caller asking for bf16 x bf16 (having chosen vdpbf16ps, as a convolution in its `dot` mode)
// always gets bf16 pairs at the avx512bf16 level and above, even where pack_b widens.
PackedMatrix allocate_packed_b(int64_t k, int64_t n, DType b_dtype, DType a_dtype);
void gemm_prepacked(const MatrixView& a, const PackedMatrix& b, const MutableMatrixView& c,
                    const GemmEpilogue& epilogue = {}, const PackedRange& range = {});

// Plain triple loop in f64: the reference the tests compare every path against.
void gemm_reference(const MatrixView& a, const MatrixView& b, const MutableMatrixView& c,
                    const GemmEpilogue& epilogue = {});

// The activations in f64, exactly as defined (GELU tanh and erf forms, SiLU = x sigmoid(x)).
double reference_activation(Activation act, double x);

}  // namespace mixprec::kernels
