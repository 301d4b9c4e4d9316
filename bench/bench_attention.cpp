// Attention benchmark: flash-style scaled dot-product attention, f32 and bf16, seq 256..4096,
// head_dim 64, GFLOP/s (4 B H Sq Sk D flops; half of that when causal) and % of the peak.
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/attention.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/peak.h"

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  const Options o =
      parse_options(argc, argv,
                    "Usage: bench_attention [--quick] [--json] [--threads N]\n"
                    "Flash-style attention GFLOP/s and extra memory, f32 vs bf16 (AMX on and\n"
                    "off), interleaved rounds, 2 threads unless --threads N.");
  if (o.threads > 0) set_num_threads(o.threads);
  const int threads = num_threads();
  const double peak_f32 = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, threads);
  const double peak_bf16 = isa_supported(IsaLevel::Avx512Bf16)
                               ? kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, threads)
                               : peak_f32;
  const double peak_amx = active_isa() >= IsaLevel::Amx
                              ? kernels::measure_peak_gflops(kernels::PeakKind::AmxBf16, threads)
                              : 0.0;
  struct Shape {
    int64_t b, h, s, d;
    bool causal;
  };
  std::vector<Shape> shapes = {{1, 8, 256, 64, false},
                               {1, 8, 1024, 64, false},
                               {1, 8, 1024, 64, true},
                               {1, 2, 4096, 64, false},
                               {1, 8, 1024, 128, false}};
  if (o.quick) shapes = {{1, 8, 1024, 64, false}};
  Generator gen(1);
  std::vector<Row> rows;
  for (const Shape& s : shapes)
    for (DType t : {DType::F32, DType::BF16}) {
      const Tensor q = Tensor::randn({s.b, s.h, s.s, s.d}, gen, t),
                   k = Tensor::randn({s.b, s.h, s.s, s.d}, gen, t),
                   v = Tensor::randn({s.b, s.h, s.s, s.d}, gen, t);
      const Tensor out = Tensor::empty({s.b, s.h, s.s, s.d}, t);
      kernels::AttentionOptions opt;
      opt.causal = s.causal;
      CachingAllocator& alloc = CachingAllocator::global();
      alloc.reset_peak();
      const std::size_t before = alloc.stats().allocated_bytes;
      kernels::scaled_dot_product_attention(q, k, v, out, opt);
      const double extra_mib = double(alloc.stats().peak_allocated_bytes - before) / (1 << 20);
      const bool amx_variant = t == DType::BF16 && active_isa() >= IsaLevel::Amx;
      std::vector<std::function<void()>> fns = {
          [&] { kernels::scaled_dot_product_attention(q, k, v, out, opt); }};
      if (amx_variant)
        fns.emplace_back([&] {
          const ScopedIsa below_amx(IsaLevel::Avx512Bf16);
          kernels::scaled_dot_product_attention(q, k, v, out, opt);
        });
      const std::vector<Timing> tms = time_interleaved(fns, 2, 7, o.quick ? 0.4 : 1.2);
      const double flops =
          4.0 * s.b * s.h * double(s.s) * double(s.s) * s.d * (s.causal ? 0.5 : 1.0);
      for (std::size_t i = 0; i < tms.size(); ++i) {
        const Timing& tm = tms[i];
        const double gflops = flops / tm.median_s / 1e9;
        const double peak = t != DType::BF16        ? peak_f32
                            : i == 0 && amx_variant ? peak_amx
                                                    : peak_bf16;
        Row r;
        r.text("shape", "b" + std::to_string(s.b) + " h" + std::to_string(s.h) + " s" +
                            std::to_string(s.s) + " d" + std::to_string(s.d) +
                            (s.causal ? " causal" : ""));
        r.num("threads", threads, 0)
            .text("dtype", std::string(dtype_name(t)))
            .text("gemm", t != DType::BF16        ? "f32 fma"
                          : i == 0 && amx_variant ? "amx"
                                                  : "vdpbf16ps")
            .num("ms", tm.median_s * 1e3, 3);
        r.num("spread_ms", (tm.max_s - tm.min_s) * 1e3, 3).num("gflops", gflops, 1);
        r.num("pct_peak", 100 * gflops / peak, 1)
            .num("best_gflops", flops / tm.min_s / 1e9, 1)
            .num("best_pct_peak", 100 * flops / tm.min_s / 1e9 / peak, 1)
            .num("extra_mib", extra_mib, 2);
        rows.push_back(r);
      }
    }
  if (!o.json)
    std::printf("CPU %s; %d-thread peak f32 %.1f, bf16 %.1f GFLOP/s\n\n",
                cpu_features().model.c_str(), threads, peak_f32, peak_bf16);
  if (!o.json && peak_amx > 0)
    std::printf("AMX tile peak %.1f GFLOP/s (the amx rows' %%)\n\n", peak_amx);
  print_table(rows, o);
  if (o.json) {
    char peak[96];
    std::snprintf(peak, sizeof peak, "{\"f32\": %.1f, \"bf16\": %.1f}", peak_f32, peak_bf16);
    print_json("attention", rows, {{"peak_gflops", peak}});
  }
  return 0;
}
