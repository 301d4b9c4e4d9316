// Tensor factories: constant fills, ranges, copies of host data and random tensors.
#include <cmath>
#include <cstring>

#include "mixprec/core/capture.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/convert.h"

namespace mixprec {

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemoryFormat format) {
  Tensor t = empty(shape, dtype, format);
  t.zero_();
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, MemoryFormat format) {
  return full(shape, 1.0, dtype, format);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, MemoryFormat format) {
  Tensor t = empty(shape, dtype, format);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) {
  Tensor t = empty({}, dtype);
  kernels::convert(&value, DType::F64, t.data_ptr(), dtype, 1);
  capture::note_host_constant(*t.storage());
  return t;
}

Tensor Tensor::arange(double end, DType dtype) { return arange(0.0, end, 1.0, dtype); }

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  MIXPREC_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
                "[arange] start, end and step must be finite, got ", start, ", ", end, ", ", step);
  MIXPREC_CHECK(step != 0.0, "[arange] step must be nonzero");
  MIXPREC_CHECK((end - start) * step >= 0.0, "[arange] step ", step, " moves away from end ", end,
                " when starting at ", start);
  const double count = std::ceil((end - start) / step);
  MIXPREC_CHECK(count < 9.0e15, "[arange] ", count, " elements is too many");
  const auto n = static_cast<int64_t>(count);
  // Values are made in f64 and rounded once into the target dtype.
  Tensor values = empty({n}, DType::F64);
  auto* v = values.data<double>();  // (n)
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  capture::note_host_constant(*values.storage());
  return values.to(dtype);
}

Tensor Tensor::from_buffer(const void* data, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (t.nbytes() > 0) {
    MIXPREC_CHECK(data != nullptr, "[from_buffer] null data for shape ", shape_to_string(shape));
    std::memcpy(t.data_ptr(), data, t.nbytes());
  }
  capture::note_host_constant(*t.storage());
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                         std::shared_ptr<void> owner) {
  const int64_t n = shape_numel(shape, "from_blob");
  MIXPREC_CHECK(strides.size() == shape.size(), "[from_blob] ", strides.size(),
                " strides for shape ", shape_to_string(shape));
  int64_t last = 0;  // highest element index reachable; the storage spans exactly up to it
  for (std::size_t d = 0; d < shape.size(); ++d) {
    MIXPREC_CHECK(strides[d] >= 0, "[from_blob] negative stride ", strides[d], " in dim ", d,
                  " of shape ", shape_to_string(shape), " (strides ", shape_to_string(strides),
                  "): mixprec tensors have non-negative strides");
    if (shape[d] > 0) last += (shape[d] - 1) * strides[d];
  }
  MIXPREC_CHECK(n == 0 || data != nullptr, "[from_blob] null data for shape ",
                shape_to_string(shape));
  const std::size_t nbytes = n == 0 ? 0 : static_cast<std::size_t>(last + 1) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(data, nbytes, std::move(owner));
  capture::note_host_constant(*storage);  // memory the caller owns and vouches for
  return Tensor(std::move(storage), shape, strides, 0, dtype);
}

// ---- random ----

namespace {

void check_floating(DType dtype, const char* op) {
  MIXPREC_CHECK(is_floating(dtype), "[", op,
                "] expected a floating dtype (f64, f32, f16, bf16), got ", dtype_name(dtype));
}

// Fills a fresh contiguous tensor block by block in parallel. Block b of the reserved range
// produces elements [b * per_block, (b + 1) * per_block) via make(block_words, out, count), so
// the result is the same for any thread count.
template <typename T, typename Make>
Tensor fill_blocks(const Shape& shape, DType dtype, Generator& gen, int64_t per_block, Make make) {
  // A replay would repeat the capture's draws, not draw new ones.
  capture::note_host_access(nullptr, "a random tensor (Tensor::rand, randn, uniform, normal)");
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t n = out.numel();
  const int64_t blocks = (n + per_block - 1) / per_block;
  const uint64_t first = gen.reserve_blocks(static_cast<uint64_t>(blocks));
  T* data = out.data<T>();  // (n)
  parallel_for(0, blocks, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const int64_t begin = b * per_block;
      make(gen.block(first + static_cast<uint64_t>(b)), data + begin,
           std::min(per_block, n - begin));
    }
  });
  return out;
}

// The drawn values in f64 for F64 tensors, else in f32 then rounded by the conversion kernel,
// which is what makes 16-bit results identical on every ISA level.
Tensor finish(const Tensor& drawn, DType dtype) { return drawn.to(dtype); }

}  // namespace

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  check_floating(dtype, "uniform");
  MIXPREC_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
                "[uniform] expected finite lo <= hi, got lo=", lo, " hi=", hi);
  shape_numel(shape, "uniform");
  const double width = hi - lo;
  if (dtype == DType::F64) {
    // Two words per element: 53 random bits.
    return fill_blocks<double>(shape, dtype, gen, 2,
                               [&](const std::array<uint32_t, 4>& w, double* out, int64_t count) {
                                 for (int64_t i = 0; i < count; ++i) {
                                   const uint64_t bits = w[2 * i] | (uint64_t{w[2 * i + 1]} << 32);
                                   out[i] = lo + width * random_detail::u64_to_unit_double(bits);
                                 }
                               });
  }
  // One word per element, keeping the dtype's significand bits: unit = k / 2^bits, exact in
  // the dtype, so the later rounding cannot carry [0, 1) up to 1.
  const int bits = info(dtype).mantissa_bits + 1;
  const float unit_scale = std::ldexp(1.0f, -bits);
  Tensor drawn = fill_blocks<float>(
      shape, DType::F32, gen, 4, [&](const std::array<uint32_t, 4>& w, float* out, int64_t count) {
        for (int64_t i = 0; i < count; ++i)
          out[i] = static_cast<float>(
              lo + width * (static_cast<float>(w[i] >> (32 - bits)) * unit_scale));
      });
  return finish(drawn, dtype);
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  check_floating(dtype, "normal");
  MIXPREC_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0,
                "[normal] expected finite mean and std >= 0, got mean=", mean, " std=", std);
  shape_numel(shape, "normal");
  // Box-Muller gives two values per block.
  if (dtype == DType::F64) {
    return fill_blocks<double>(shape, dtype, gen, 2,
                               [&](const std::array<uint32_t, 4>& w, double* out, int64_t count) {
                                 const auto z = random_detail::box_muller(w);
                                 for (int64_t i = 0; i < count; ++i) out[i] = mean + std * z[i];
                               });
  }
  Tensor drawn = fill_blocks<float>(
      shape, DType::F32, gen, 2, [&](const std::array<uint32_t, 4>& w, float* out, int64_t count) {
        const auto z = random_detail::box_muller(w);
        for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(mean + std * z[i]);
      });
  return finish(drawn, dtype);
}

Tensor Tensor::rand(const Shape& shape, Generator& gen, DType dtype) {
  check_floating(dtype, "rand");
  return uniform(shape, 0.0, 1.0, gen, dtype);
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype) {
  check_floating(dtype, "randn");
  return normal(shape, 0.0, 1.0, gen, dtype);
}

// The default-generator overloads hold its mutex so concurrent callers never share a counter
// range.
Tensor Tensor::rand(const Shape& shape, DType dtype) {
  std::lock_guard lock(default_generator_mutex());
  return rand(shape, default_generator(), dtype);
}
Tensor Tensor::randn(const Shape& shape, DType dtype) {
  std::lock_guard lock(default_generator_mutex());
  return randn(shape, default_generator(), dtype);
}
Tensor Tensor::uniform(const Shape& shape, double lo, double hi, DType dtype) {
  std::lock_guard lock(default_generator_mutex());
  return uniform(shape, lo, hi, default_generator(), dtype);
}
Tensor Tensor::normal(const Shape& shape, double mean, double std, DType dtype) {
  std::lock_guard lock(default_generator_mutex());
  return normal(shape, mean, std, default_generator(), dtype);
}

}  // namespace mixprec
