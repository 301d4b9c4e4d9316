// The GEMM reference: a plain triple loop in f64, rounded once to C's dtype. Slow on purpose;
// the tests hold every fast path against it, and f64 operands (gradient checks) use it.
#include <cmath>
#include <vector>

#include "mixprec/core/error.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"

namespace mixprec::kernels {
namespace {

double load(const void* base, DType t, int64_t index) {
  double v;
  convert(static_cast<const char*>(base) + index * static_cast<int64_t>(dtype_size(t)), t, &v,
          DType::F64, 1);
  return v;
}

void store(void* base, DType t, int64_t index, double v) {
  convert(&v, DType::F64, static_cast<char*>(base) + index * static_cast<int64_t>(dtype_size(t)), t,
          1);
}

// The matrix as f64, row-major [rows][cols]; every float dtype widens exactly.
std::vector<double> widen(const MatrixView& x) {
  std::vector<double> out(static_cast<std::size_t>(x.rows * x.cols));
  const std::size_t elem = dtype_size(x.dtype);
  for (int64_t r = 0; r < x.rows; ++r)
    convert_strided(
        static_cast<const char*>(x.data) + static_cast<std::size_t>(r * x.row_stride) * elem,
        x.dtype, x.col_stride, out.data() + r * x.cols, DType::F64, 1,
        static_cast<std::size_t>(x.cols));
  return out;
}

}  // namespace

double reference_activation(Activation act, double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  switch (act) {
    case Activation::None:
      return x;
    case Activation::ReLU:
      return x > 0.0 || std::isnan(x) ? x : 0.0;
    case Activation::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case Activation::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::SiLU:
      return x / (1.0 + std::exp(-x));
  }
  return x;
}

void gemm_reference(const MatrixView& a, const MatrixView& b, const MutableMatrixView& c,
                    const GemmEpilogue& ep) {
  MIXPREC_CHECK(a.cols == b.rows && c.rows == a.rows && c.cols == b.cols,
                "[gemm_reference] shapes A [", a.rows, ", ", a.cols, "] B [", b.rows, ", ", b.cols,
                "] C [", c.rows, ", ", c.cols, "] do not chain");
  const std::vector<double> a64 = widen(a), b64 = widen(b);  // [M][K], [K][N]
  const int64_t kdim = a.cols;
  for (int64_t m = 0; m < c.rows; ++m) {
    for (int64_t n = 0; n < c.cols; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < kdim; ++k) acc += a64[m * kdim + k] * b64[k * c.cols + n];
      double v = ep.alpha * acc;
      if (ep.beta != 0.0f) v += ep.beta * load(c.data, c.dtype, m * c.row_stride + n);
      if (ep.bias != nullptr) v += load(ep.bias, ep.bias_dtype, n);
      v = reference_activation(ep.activation, v);
      if (ep.residual != nullptr) v += load(ep.residual, ep.residual_dtype, m * ep.residual_ld + n);
      store(c.data, c.dtype, m * c.row_stride + n, v);
    }
  }
}

}  // namespace mixprec::kernels
