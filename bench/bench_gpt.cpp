// GPT training-step benchmark (issue #5): models::GPT small() (6 layers, d_model 384, 6 heads,
// context 256, ~10.8M parameters) at batch 8 x 256 byte tokens of the shipped corpus.
// Times forward, and forward + backward of the loss, in f32 and after model.to(BF16) (true
// half precision, LayerNorms f32), with the model FLOP rate as % of this machine's peak.
// fwd_bwd_ms is the median wall time, min_ms the fastest step, cpu_ms the median process CPU
// time per step (the undisturbed figure on a shared machine when MIXPREC_NUM_THREADS=1).
// The PyTorch peer of the same model is bench/peers/gpt_train.py (its step adds AdamW).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/peak.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/gpt.h"
#include "mixprec/models/text_dataset.h"

#ifndef MIXPREC_SOURCE_DIR
#define MIXPREC_SOURCE_DIR "."
#endif

namespace {

// Wall time and process CPU time (all threads) of one call, medians over the repetitions.
// On a shared machine the wall time includes waits for a core; CPU time does not (but does
// count OpenMP's spin-waiting), so with one thread CPU time is the undisturbed step time.
struct WallAndCpu {
  mixprec::bench::Timing wall;
  double cpu_median_s = 0;
};

template <typename Fn>
WallAndCpu time_wall_and_cpu(const Fn& fn, int warmup, int reps, double min_seconds) {
  std::vector<double> cpu;
  const mixprec::bench::Timing wall = mixprec::bench::time_it(
      [&] {
        timespec a{}, b{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        fn();
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        cpu.push_back(static_cast<double>(b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec));
      },
      warmup, reps, min_seconds);
  cpu.erase(cpu.begin(), cpu.begin() + warmup);
  std::sort(cpu.begin(), cpu.end());
  return {wall, cpu[cpu.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  const Options o = parse_options(
      argc, argv,
      "Usage: bench_gpt [--quick] [--json]\n"
      "GPT small() forward and forward+backward ms at batch 8 x 256, f32 vs bf16 weights.");
  const int threads = num_threads();
  const double peak_f32 = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, threads);
  const double peak_bf16 = isa_supported(IsaLevel::Avx512Bf16)
                               ? kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, threads)
                               : peak_f32;
  const models::GPTConfig config = models::GPTConfig::small();
  const int64_t batch = 8, seq = config.context;
  const auto data =
      models::TextDataset::from_file(std::string(MIXPREC_SOURCE_DIR) + "/data/shakespeare.txt");
  Generator gen(1337);
  models::GPT model(config, gen);
  const models::TokenBatch b = data.batch(models::Split::Train, batch, seq, gen);

  // Model FLOPs per forward: 2 per weight per token for every GEMM (blocks and the tied head),
  // plus causal attention's QK^T and PV (2 * 2 * T * D per token per layer, halved by the mask).
  const double tokens = static_cast<double>(batch * seq);
  const double d = static_cast<double>(config.d_model);
  const double gemm_weights =
      static_cast<double>(config.layers) * 12.0 * d * d + static_cast<double>(config.vocab) * d;
  const double fwd_flops =
      tokens * (2.0 * gemm_weights + static_cast<double>(config.layers) * 2.0 * seq * d);
  std::vector<Row> rows;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    if (dtype == DType::BF16) model.to(DType::BF16);
    CachingAllocator& alloc = CachingAllocator::global();
    auto forward = [&] {
      NoGrad no_grad;
      model.loss(b.inputs, b.targets);
    };
    auto step = [&] {
      for (const Tensor& p : model.parameters()) p.zero_grad();
      model.loss(b.inputs, b.targets).backward();
    };
    const Timing f = time_it(forward, 1, o.quick ? 2 : 5, o.quick ? 0.5 : 2.0);
    alloc.reset_peak();
    const WallAndCpu measured = time_wall_and_cpu(step, 1, o.quick ? 2 : 5, o.quick ? 1.0 : 4.0);
    const Timing& s = measured.wall;
    const double peak = dtype == DType::BF16 ? peak_bf16 : peak_f32;
    const double step_gflops = 3.0 * fwd_flops / s.median_s / 1e9;
    Row r;
    r.text("model", "small b8 t256")
        .num("threads", threads, 0)
        .text("weights", std::string(dtype_name(dtype)));
    r.num("fwd_ms", f.median_s * 1e3, 1).num("fwd_bwd_ms", s.median_s * 1e3, 1);
    r.num("min_ms", s.min_s * 1e3, 1).num("cpu_ms", measured.cpu_median_s * 1e3, 1);
    r.num("tokens_per_s", tokens / s.median_s, 0);
    r.num("gflops", step_gflops, 1).num("pct_peak", 100 * step_gflops / peak, 1);
    r.num("peak_mib", static_cast<double>(alloc.stats().peak_allocated_bytes) / (1 << 20), 1);
    rows.push_back(r);
  }
  if (!o.json)
    std::printf("CPU %s; %d-thread peak f32 %.1f, bf16 %.1f GFLOP/s; %s\n\n",
                cpu_features().model.c_str(), threads, peak_f32, peak_bf16,
                model.summary().c_str());
  print_table(rows, o);
  if (o.json) {
    char peak[96];
    std::snprintf(peak, sizeof peak, "{\"f32\": %.1f, \"bf16\": %.1f}", peak_f32, peak_bf16);
    print_json("gpt", rows, {{"peak_gflops", peak}});
  }
  return 0;
}
