// Optimizer kernel entry points: operand checks, the per-step constants (in f64, once), the
// split over threads and the dispatch to the per-level kernels (optim_impl.h); plus the
// gradient-norm reduction clipping uses.
#include "mixprec/kernels/optim.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "../elementwise/elementwise_frontend.h"
#include "../isa/family_kernels.h"
#include "mixprec/core/cpu_features.h"
#include "mixprec/core/float16.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "optim_kernels.h"

namespace mixprec::kernels {

namespace {

using optim_detail::OptimKernels;
using optim_detail::OptimRun;

// Elements per thread chunk: an update moves ~30 bytes per element, so below this a thread
// costs more than it saves.
constexpr int64_t kGrain = int64_t{1} << 14;

const OptimKernels& kernels_for(bool f64) {
  using namespace optim_detail;
  return family_kernels<OptimKernels, optim_scalar, optim_avx2, optim_avx512, optim_f64>(f64);
}

bool is_16bit(DType t) { return t == DType::F16 || t == DType::BF16; }

// The stream's keys: one Philox block of (param index, step) under the seed. key2 varies the
// second hash key with the high half of the element index.
std::array<uint32_t, 4> stream_keys(const StochasticStream& s) {
  return philox4x32_10(
      {static_cast<uint32_t>(s.param_index), static_cast<uint32_t>(s.param_index >> 32),
       static_cast<uint32_t>(s.step), static_cast<uint32_t>(s.step >> 32)},
      {static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32)});
}

uint32_t key1_for(const std::array<uint32_t, 4>& keys, uint64_t element) {
  return keys[1] ^ (static_cast<uint32_t>(element >> 32) * keys[2]);
}

void check_companion(const Tensor& t, const Tensor& param, DType dtype, const char* op,
                     const char* role) {
  frontend::check_defined(t, op, role);
  MIXPREC_CHECK(t.dtype() == dtype, "[", op, "] ", role, " has dtype ", dtype_name(t.dtype()),
                ", expected ", dtype_name(dtype), " for a ", dtype_name(param.dtype()),
                " parameter");
  frontend::check_shape(t, param.shape(), op, role, "the parameter's shape");
  MIXPREC_CHECK(t.strides() == param.strides(), "[", op, "] ", role, " has strides ",
                shape_to_string(t.strides()), ", expected the parameter's ",
                shape_to_string(param.strides()));
}

// Checks every operand, stages the gradient into the parameter's layout and runs `kernel`
// over the elements in memory order.
template <class Kernel>
void run_update(const char* op, const OptimOperands& ops, bool uses_state0, bool uses_state1,
                const Kernel& kernel) {
  const Tensor& p = ops.param;
  frontend::check_floating(p, op, "param");
  frontend::check_floating(ops.grad, op, "grad");
  frontend::check_shape(ops.grad, p.shape(), op, "grad", "the parameter's shape");
  MIXPREC_CHECK(p.is_non_overlapping_and_dense(), "[", op,
                "] the parameter must be dense, got strides ", shape_to_string(p.strides()),
                " for shape ", shape_to_string(p.shape()));
  const DType lane = p.dtype() == DType::F64 ? DType::F64 : DType::F32;
  if (ops.master.defined()) {
    MIXPREC_CHECK(is_16bit(p.dtype()), "[", op,
                  "] master weights are for f16/bf16 parameters, got a ", dtype_name(p.dtype()),
                  " parameter");
    check_companion(ops.master, p, DType::F32, op, "master");
  }
  if (uses_state0) check_companion(ops.state0, p, lane, op, "state0");
  if (uses_state1) check_companion(ops.state1, p, lane, op, "state1");
  Tensor g = ops.grad;
  if (g.strides() != p.strides() || frontend::overlaps(g, p)) {
    g = Tensor::empty_like(p, ops.grad.dtype());
    g.copy_(ops.grad);
  }
  const int64_t total = p.numel();
  if (total == 0) return;

  const OptimKernels& k = kernels_for(p.dtype() == DType::F64);
  const bool stochastic = ops.rounding == Rounding::Stochastic && is_16bit(p.dtype());
  const std::array<uint32_t, 4> keys =
      stochastic ? stream_keys(ops.stream) : std::array<uint32_t, 4>{};
  auto at = [](const Tensor& t, int64_t i) -> char* {
    return t.defined()
               ? static_cast<char*>(t.data_ptr()) + i * static_cast<int64_t>(t.element_size())
               : nullptr;
  };
  parallel_for(0, total, kGrain, [&](int64_t lo, int64_t hi) {
    // Runs stop at multiples of 2^32 elements, where the random stream's key changes.
    for (int64_t begin = lo; begin < hi;) {
      const int64_t boundary = ((begin >> 32) + 1) << 32;
      const int64_t end = std::min(hi, boundary);
      OptimRun r;
      r.n = end - begin;
      r.param = at(p, begin);
      r.param_dtype = p.dtype();
      r.grad = at(g, begin);
      r.grad_dtype = g.dtype();
      r.master = reinterpret_cast<float*>(at(ops.master, begin));
      r.state0 = uses_state0 ? at(ops.state0, begin) : nullptr;
      r.state1 = uses_state1 ? at(ops.state1, begin) : nullptr;
      r.stochastic = stochastic;
      r.key0 = keys[0];
      r.key1 = key1_for(keys, static_cast<uint64_t>(begin));
      r.index_lo = static_cast<uint32_t>(begin);
      kernel(k, r);
      begin = end;
    }
  });
}

}  // namespace

void adam_step(const AdamStep& hp, const OptimOperands& ops) {
  MIXPREC_CHECK(hp.step >= 1, "[adam_step] step must be >= 1, got ", hp.step);
  optim_detail::AdamConsts c{};
  c.beta1 = hp.beta1;
  c.one_minus_beta1 = 1.0 - hp.beta1;
  c.beta2 = hp.beta2;
  c.one_minus_beta2 = 1.0 - hp.beta2;
  const double t = static_cast<double>(hp.step);
  c.step_size = hp.lr / (1.0 - std::pow(hp.beta1, t));
  c.sqrt_bc2 = std::sqrt(1.0 - std::pow(hp.beta2, t));
  c.eps = hp.eps;
  c.l2 = hp.decoupled ? 0.0 : hp.weight_decay;
  c.has_decay = hp.decoupled && hp.weight_decay != 0;
  c.decay = c.has_decay ? 1.0 - hp.lr * hp.weight_decay : 1.0;
  run_update("adam_step", ops, true, true,
             [&](const OptimKernels& k, const OptimRun& r) { k.adam(c, r); });
}

void sgd_step(const SgdStep& hp, const OptimOperands& ops) {
  const optim_detail::SgdConsts c{hp.lr, hp.momentum, hp.weight_decay, hp.nesterov, hp.first};
  const bool momentum = hp.momentum != 0;
  run_update("sgd_step", ops, momentum, false,
             [&](const OptimKernels& k, const OptimRun& r) { k.sgd(c, r); });
}

uint32_t stochastic_bits(const StochasticStream& stream, uint64_t element) {
  const std::array<uint32_t, 4> keys = stream_keys(stream);
  return optim_detail::hash_bits(keys[0], key1_for(keys, element), static_cast<uint32_t>(element));
}

float round_stochastic(float x, DType dtype, uint32_t bits) {
  MIXPREC_CHECK(is_16bit(dtype), "[round_stochastic] expected f16 or bf16, got ",
                dtype_name(dtype));
  if (!std::isfinite(x) || x == 0.0f) return x;
  if (dtype == DType::BF16) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    return std::bit_cast<float>((u + (bits >> 16)) & 0xFFFF0000u);
  }
  const float a = std::fabs(x);
  const int e = a < 0x1p-14f ? -14 : std::ilogb(a);
  const float q = std::ldexp(a, 10 - e);
  const float k = std::trunc(q);
  const float u = static_cast<float>(bits >> 8) * 0x1p-24f;
  float r = std::ldexp(k + (u < q - k ? 1.0f : 0.0f), e - 10);
  if (r > 65504.0f) r = INFINITY;  // past f16's largest value, as the store rounds it
  return std::signbit(x) ? -r : r;
}

namespace {

// The reference of optim_detail::square_sum_<level> (optim_kernels.h).
double square_sum_scalar(const void* data, DType dtype, int64_t n) {
  double acc[optim_detail::kSquareSumLanes] = {};
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(data);
    int64_t i = 0;
    for (; i + optim_detail::kSquareSumLanes <= n; i += optim_detail::kSquareSumLanes)
      for (int j = 0; j < optim_detail::kSquareSumLanes; ++j) {
        const auto a = static_cast<double>(x[i + j]);
        acc[j] += a * a;
      }
    for (; i < n; ++i) acc[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  });
  double total = 0.0;
  for (double a : acc) total += a;
  return total;
}

constexpr IsaTable<optim_detail::SquareSumFn> kSquareSum{
    {square_sum_scalar, nullptr, optim_detail::square_sum_avx512}};

}  // namespace

double norm_pow_sum(const Tensor& g, double p) {
  frontend::check_floating(g, "norm_pow_sum", "g");
  MIXPREC_CHECK(p > 0, "[norm_pow_sum] norm type must be > 0, got ", p);
  const Tensor x = g.is_non_overlapping_and_dense() ? g : g.contiguous();
  const int64_t total = x.numel();
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks));  // (blocks,)
  const bool inf = std::isinf(p);
  // The 2-norm of an f32, f16 or bf16 tensor on eight f64 lanes where the level has them (the
  // same accumulators as block_sum below, so the same bits).
  optim_detail::SquareSumFn* square_sum =
      p == 2.0 && x.dtype() != DType::F64 ? kSquareSum() : nullptr;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16> || std::is_same_v<T, double>) {
      const T* data = x.data<T>();
      // Sums over eight interleaved accumulators: independent dependency chains (a single
      // f64 chain runs at one add per add-latency), combined at the end of each block.
      auto block_sum = [&](int64_t lo, int64_t hi, auto term) {
        constexpr int kLanes = optim_detail::kSquareSumLanes;
        double acc[kLanes] = {};
        int64_t i = lo;
        for (; i + kLanes <= hi; i += kLanes)
          for (int j = 0; j < kLanes; ++j)
            acc[j] += term(std::fabs(static_cast<double>(data[i + j])));
        for (; i < hi; ++i) acc[0] += term(std::fabs(static_cast<double>(data[i])));
        double block_total = 0.0;
        for (double a : acc) block_total += a;
        return block_total;
      };
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t lo = b * kBlock, hi = std::min(total, lo + kBlock);
          double acc = 0.0;
          if (inf) {
            for (int64_t i = lo; i < hi; ++i) {
              const double a = std::fabs(static_cast<double>(data[i]));
              acc = std::isnan(a) || std::isnan(acc) ? std::numeric_limits<double>::quiet_NaN()
                                                     : std::max(acc, a);
            }
          } else if (square_sum != nullptr) {
            acc = square_sum(data + lo, x.dtype(), hi - lo);
          } else if (p == 2.0) {
            acc = block_sum(lo, hi, [](double a) { return a * a; });
          } else if (p == 1.0) {
            acc = block_sum(lo, hi, [](double a) { return a; });
          } else {
            acc = block_sum(lo, hi, [p](double a) { return std::pow(a, p); });
          }
          partial[static_cast<std::size_t>(b)] = acc;
        }
      });
    }
  });
  double result = 0.0;
  for (double v : partial)
    result =
        inf ? (std::isnan(v) || std::isnan(result) ? v + result : std::max(result, v)) : result + v;
  return result;
}

}  // namespace mixprec::kernels
