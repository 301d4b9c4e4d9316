// The fused optimizer update (kernels::adam_step) per kernel level: ns per element and GB/s
// (bytes read + written), next to memcpy of the same traffic, for the parameter layouts a
// mixed-precision run uses: f32 parameters, bf16/f16 parameters with f32 master weights
// (round to nearest even or stochastic), with f32 gradients (what GradScaler::unscale leaves)
// or bf16 gradients. Not a test: nothing here passes or fails (DESIGN.md section 7).
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/optim.h"

namespace mixprec::bench {
namespace {

constexpr const char* kUsage =
    "Usage: bench_optim [--quick] [--json]\n"
    "AdamW fused update throughput per kernel level and layout, in ns/element and GB/s (bytes\n"
    "read + written), next to memcpy of the same traffic. Full run: 16M elements, every level;\n"
    "--quick: 4M elements, scalar and the best level.";

struct Layout {
  const char* name;
  DType param, grad;
  bool master;
  kernels::Rounding rounding;
};

constexpr Layout kLayouts[] = {
    {"f32", DType::F32, DType::F32, false, kernels::Rounding::NearestEven},
    {"bf16+master", DType::BF16, DType::F32, true, kernels::Rounding::NearestEven},
    {"bf16+master sr", DType::BF16, DType::F32, true, kernels::Rounding::Stochastic},
    {"bf16+master bf16 grad", DType::BF16, DType::BF16, true, kernels::Rounding::NearestEven},
    {"f16+master sr", DType::F16, DType::F32, true, kernels::Rounding::Stochastic},
};

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  const Options o = parse_options(argc, argv, kUsage);
  const int64_t n = o.quick ? (int64_t{1} << 22) : (int64_t{1} << 24);
  std::vector<IsaLevel> levels;
  for (IsaLevel l : kAllIsaLevels)
    if (isa_supported(l) && (!o.quick || l == IsaLevel::Scalar || l == best_isa()))
      levels.push_back(l);

  std::vector<Row> rows;
  Generator gen(1);
  for (const Layout& layout : kLayouts) {
    kernels::OptimOperands ops;
    const Tensor w = Tensor::uniform({n}, -1, 1, gen);
    ops.param = w.to(layout.param).clone();
    ops.grad = Tensor::uniform({n}, -1, 1, gen, layout.grad);
    if (layout.master) ops.master = w.clone();
    ops.state0 = Tensor::zeros({n});
    ops.state1 = Tensor::zeros({n});
    ops.rounding = layout.rounding;
    // Bytes: read grad, weight (master or param), m, v; write m, v, master, param.
    const double bytes = static_cast<double>(n) *
                         (dtype_size(layout.grad) + 4.0 * 4 + (layout.master ? 4.0 : 0.0) +
                          static_cast<double>(dtype_size(layout.param)) * (layout.master ? 1 : 2));
    std::vector<unsigned char> src(static_cast<std::size_t>(bytes / 2)), dst(src.size());
    const Timing copy =
        time_it([&] { std::memcpy(dst.data(), src.data(), src.size()); }, 1, o.quick ? 3 : 7, 0.2);
    for (IsaLevel level : levels) {
      ScopedIsa at(level);
      int64_t step = 0;
      const Timing t = time_it(
          [&] {
            ops.stream.step = static_cast<uint64_t>(++step);
            kernels::adam_step({.lr = 1e-4, .weight_decay = 0.1, .step = step}, ops);
          },
          1, o.quick ? 3 : 7, 0.2);
      rows.push_back(Row{}
                         .text("layout", layout.name)
                         .text("level", std::string(isa_name(level)))
                         .num("threads", num_threads(), 0)
                         .num("ns_per_element", t.median_s * 1e9 / static_cast<double>(n), 3)
                         .num("gb_per_s", bytes / t.median_s * 1e-9)
                         .num("memcpy_gb_per_s", bytes / copy.median_s * 1e-9)
                         .num("pct_of_memcpy", 100.0 * copy.median_s / t.median_s, 0));
    }
  }
  print_table(rows, o);
  print_json("optim", rows, {{"elements", std::to_string(n)}});
  return 0;
}
