#pragma once
// How the front end of a template kernel family (elementwise, reduce, softmax, loss, norm, norm
// backward, optim) picks the kernels for one call: the family's f64 path, or the table of the
// active level through an IsaTable over its scalar, AVX2 and AVX-512 accessors (the higher
// levels fall back to AVX-512). Written once here instead of in each front end.
#include "mixprec/core/cpu_features.h"

namespace mixprec::kernels {

template <class Table, const Table& (*Scalar)(), const Table& (*Avx2)(), const Table& (*Avx512)(),
          const Table& (*F64)()>
const Table& family_kernels(bool f64) {
  static constexpr IsaTable<const Table&()> kLevels{{Scalar, Avx2, Avx512, nullptr}};
  return f64 ? F64() : kLevels()();
}

}  // namespace mixprec::kernels
