// PeakNet (issue #13) on one 352 x 384 detector panel: the whole forward at batch 1 and 16 in
// bf16 and f32 (ms/frame, frames/s, Mpixel/s, GFLOP/s and % of the machine's measured peak),
// then its ConvNeXt block's per-pixel half at each level's shape, kernels::convnext_mlp against
// the layers it replaces, interleaved in one run. `--threads N` sets the thread count (default
// 1). Random weights: the time does not depend on their values.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/kernels/convnext.h"
#include "mixprec/kernels/peak.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/peaknet.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/activation.h"
#include "mixprec/ops/arith.h"

using namespace mixprec;

namespace {

constexpr int64_t kRows = 352, kCols = 384;

// checkpoints/peaknet.safetensors's architecture (session 17; docs/STREAM.md): session 8's
// widths with 3x3 depthwise convolutions. The weights do not change the time.
models::PeakNetConfig shipped_config() {
  models::PeakNetConfig c;
  c.widths = {8, 16, 32};
  c.depths = {1, 1, 1};
  c.stem_channels = 4;
  c.kernel = 3;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Options o = bench::parse_options(
      argc, argv,
      "bench_peaknet: PeakNet 8,16,32 (3x3 depthwise) forward on 352 x 384 panels (batch 1 and 16, bf16 and "
      "f32), and kernels::convnext_mlp vs the unfused layers\n  --threads N  threads (default 1)");
  const int threads = o.threads > 0 ? o.threads : 1;
  set_num_threads(threads);
  const double peak_bf16 = kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, threads);
  const double peak_f32 = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, threads);
  std::vector<bench::Row> rows;
  const InferenceMode inference;
  Generator gen(1);

  for (const DType dt : {DType::BF16, DType::F32}) {
    models::PeakNet net(shipped_config(), gen);
    net.eval();
    net.to(dt);
    const double gflop = 2.0 * static_cast<double>(net.multiply_adds(kRows, kCols)) * 1e-9;
    const double peak = dt == DType::BF16 ? peak_bf16 : peak_f32;
    for (const int64_t batch : {int64_t{1}, int64_t{16}}) {
      const Tensor frames = Tensor::uniform({batch, 1, kRows, kCols}, 0, 400, gen).to(dt);
      std::vector<uint8_t> mask(static_cast<std::size_t>(batch * kRows * kCols));
      const bench::Timing t = bench::time_it([&] { net.segment(frames, mask.data()); }, 1,
                                             o.quick ? 2 : 5, o.quick ? 0.5 : 2.0);
      const double per_frame = t.median_s / static_cast<double>(batch);
      rows.push_back(bench::Row{}
                         .text("what", "PeakNet forward + argmax")
                         .text("dtype", std::string(dtype_name(dt)))
                         .num("batch", static_cast<double>(batch), 0)
                         .num("ms_per_frame", per_frame * 1e3, 3)
                         .num("frames_per_s", 1.0 / per_frame, 1)
                         .num("mpixel_per_s", kRows * kCols / per_frame * 1e-6, 2)
                         .num("gflop_per_s", gflop / per_frame, 2)
                         .num("pct_of_peak", 100.0 * gflop / per_frame / peak, 2));
    }
  }

  // The block's per-pixel half at the three levels' shapes, bf16: fused vs the layers.
  struct Level {
    int64_t h, w, c;
  };
  for (const Level& l : {Level{176, 192, 8}, Level{88, 96, 16}, Level{44, 48, 32}}) {
    const int64_t hd = 2 * l.c;
    nn::LayerNorm norm(Shape{l.c}, 1e-6);
    nn::Linear expand(l.c, hd, true, gen), project(hd, l.c, true, gen);
    nn::GlobalResponseNorm grn(hd);
    for (nn::Module* m : std::vector<nn::Module*>{&expand, &project, &grn}) m->to(DType::BF16);
    const Tensor x = Tensor::uniform({1, l.h, l.w, l.c}, -2, 2, gen).to(DType::BF16);
    const Tensor residual = Tensor::uniform({1, l.h, l.w, l.c}, -1, 1, gen).to(DType::BF16);
    const Tensor out = Tensor::empty(x.shape(), DType::BF16);
    const kernels::ConvNextMlpWeights w{norm.weight(), norm.bias(),      1e-6,
                                        expand.weight(), expand.bias(),  grn.gamma(),
                                        grn.beta(),      grn.eps(),      project.weight(),
                                        project.bias()};
    std::vector<std::function<void()>> fns = {
        [&] { kernels::convnext_mlp(x, residual, w, out); },
        [&] {
          const Tensor h = project.forward(grn.forward(gelu(expand.forward(norm.forward(x)))));
          (void)add(residual, h);
        }};
    const std::vector<bench::Timing> t =
        bench::time_interleaved(fns, 2, o.quick ? 5 : 20, o.quick ? 0.3 : 1.5);
    const char* names[] = {"convnext_mlp (fused, 2 passes)", "layers (LayerNorm .. + residual)"};
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double pixels = static_cast<double>(l.h * l.w);
      const double gflop = 2.0 * pixels * 2.0 * static_cast<double>(l.c * hd) * 1e-9;
      rows.push_back(bench::Row{}
                         .text("what", names[i])
                         .text("dtype", "bf16")
                         .text("shape", std::to_string(l.h) + "x" + std::to_string(l.w) + "x" +
                                            std::to_string(l.c) + " r2")
                         .num("us", t[i].median_s * 1e6, 1)
                         .num("ns_per_pixel", t[i].median_s / pixels * 1e9, 2)
                         .num("gflop_per_s", gflop / t[i].median_s, 2)
                         .num("pct_of_peak", 100.0 * gflop / t[i].median_s / peak_bf16, 2));
    }
  }
  bench::print_table(rows, o);
  char peaks[128];
  std::snprintf(peaks, sizeof peaks, "{\"bf16_dot\": %.1f, \"f32_fma\": %.1f}", peak_bf16,
                peak_f32);
  bench::print_json("peaknet", rows,
                    {{"threads", std::to_string(threads)}, {"peak_gflops", peaks}});
  return 0;
}
