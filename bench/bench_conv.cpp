// 3x3 convolution benchmark (NHWC, stride 1, pad 1): mixprec f32 / bf16 next to oneDNN f32 /
// bf16 convolution in one run, GFLOP/s and % of the measured peak.
#include <omp.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/kernels/conv.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/peak.h"

#ifdef MIXPREC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace mixprec::bench {
namespace {

struct ConvShape {
  int64_t n, c, hw, o;
};

#ifdef MIXPREC_HAVE_DNNL
// oneDNN forward-inference convolution, NHWC activations, weights reordered once into the
// format it prefers (its best case), f32 bias.
struct DnnlConv {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::convolution_forward prim;
  dnnl::memory src, wei, bias, dst;
  std::string impl;
  DnnlConv(const ConvShape& s, DType t, const Tensor& x, const Tensor& w, const Tensor& b,
           const Tensor& y) {
    using tag = dnnl::memory::format_tag;
    const auto dt = t == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    const dnnl::memory::desc src_md({s.n, s.c, s.hw, s.hw}, dt, tag::nhwc),
        dst_md({s.n, s.o, s.hw, s.hw}, dt, tag::nhwc), wei_any({s.o, s.c, 3, 3}, dt, tag::any),
        wei_user({s.o, s.c, 3, 3}, dt, tag::oihw),
        bias_md({s.o}, dnnl::memory::data_type::f32, tag::a);
    const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                            dnnl::algorithm::convolution_direct, src_md, wei_any,
                                            bias_md, dst_md, {1, 1}, {1, 1}, {1, 1});
    const dnnl::convolution_forward::primitive_desc pd(d, engine);
    impl = pd.impl_info_str();
    prim = dnnl::convolution_forward(pd);
    src = dnnl::memory(src_md, engine, x.data_ptr());
    dst = dnnl::memory(dst_md, engine, y.data_ptr());
    bias = dnnl::memory(bias_md, engine, b.data_ptr());
    dnnl::memory user(wei_user, engine, w.data_ptr());
    wei = dnnl::memory(pd.weights_desc(), engine);
    dnnl::reorder(user, wei).execute(stream, user, wei);
    stream.wait();
  }
  void run() {
    prim.execute(
        stream,
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};
#endif

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  run_openmp_passive(argv);
  const Options o = parse_options(
      argc, argv,
      "Usage: bench_conv [--quick] [--json] [--threads N]\n"
      "3x3 convolution (NHWC, pad 1) GFLOP/s: mixprec f32/bf16 vs oneDNN f32/bf16, 2 threads "
      "(--threads N),\n"
      "timed in interleaved rounds. ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 keeps oneDNN off AMX.");
  std::vector<ConvShape> shapes;
  for (int64_t n : {1, 4})
    for (int64_t c : {64, 128})
      for (int64_t hw : {64, 32}) shapes.push_back({n, c, hw, c});
  // The video U-Net's small batch-1 convolutions (channels 32-256 at 64x64 .. 16x16).
  shapes.push_back({1, 32, 64, 32});
  shapes.push_back({1, 128, 16, 128});
  shapes.push_back({1, 256, 16, 256});
  if (o.quick) shapes = {{1, 64, 64, 64}, {1, 128, 32, 128}, {1, 128, 16, 128}};
  const int threads = o.threads > 0 ? o.threads : 2;
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const double peak_f32 = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, threads);
  // bf16 rows are a percentage of the AMX tile peak where the convolution runs on AMX.
  const bool amx =
      active_isa() >= IsaLevel::Amx && dispatch_config().bf16_conv == Bf16ConvCompute::Auto;
  const double peak_amx =
      amx ? kernels::measure_peak_gflops(kernels::PeakKind::AmxBf16, threads) : 0.0;
  const double peak_bf16_dot =
      isa_supported(IsaLevel::Avx512Bf16)
          ? kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, threads)
          : peak_f32;
  const double peak_bf16 = amx ? peak_amx : peak_bf16_dot;
  std::vector<Row> rows;
  Generator gen(1);
  for (const ConvShape& s : shapes) {
    const double flops = 2.0 * s.n * s.o * s.hw * s.hw * s.c * 9;
    for (DType t : {DType::F32, DType::BF16}) {
      const Tensor x = Tensor::randn({s.n, s.c, s.hw, s.hw}, gen, t).to(MemoryFormat::ChannelsLast);
      const Tensor w = Tensor::randn({s.o, s.c, 3, 3}, gen, t);
      const Tensor b = Tensor::randn({s.o}, gen, DType::F32);
      const Tensor y = Tensor::empty({s.n, s.o, s.hw, s.hw}, t, MemoryFormat::ChannelsLast);
      const double peak = t == DType::BF16 ? peak_bf16 : peak_f32;  // of the path that runs
      const std::string shape_name = "n" + std::to_string(s.n) + " " + std::to_string(s.c) + "->" +
                                     std::to_string(s.o) + " " + std::to_string(s.hw) + "x" +
                                     std::to_string(s.hw);
      // Median and best: on a shared machine the median carries the other jobs' load, the best
      // of many interleaved rounds is the uncontended speed; both ratios are printed.
      auto add = [&](const char* impl, const Timing& tm, const Timing* peer,
                     const std::string& note) {
        const double peer_ms = peer != nullptr ? peer->median_s * 1e3 : 0;
        const double ms = tm.median_s * 1e3, gflops = flops / tm.median_s / 1e9;
        Row r;
        r.text("shape", shape_name)
            .num("threads", threads, 0)
            .text("impl", impl)
            .text("dtype", std::string(dtype_name(t)));
        r.num("ms", ms, 3)
            .num("spread_ms", (tm.max_s - tm.min_s) * 1e3, 3)
            .num("gflops", gflops, 1);
        r.num("pct_peak", 100 * gflops / peak, 1)
            .num("vs_onednn", peer_ms > 0 ? peer_ms / ms : NAN, 2)
            .num("best_gflops", flops / tm.min_s / 1e9, 1)
            .num("best_vs_onednn", peer != nullptr ? peer->min_s / tm.min_s : NAN, 2)
            .text("note", note);
        rows.push_back(r);
      };
      std::vector<std::function<void()>> fns;
      std::vector<std::string> names, notes;
#ifdef MIXPREC_HAVE_DNNL
      DnnlConv dc(s, t, x, w, b, y);
      fns.emplace_back([&] { dc.run(); });
      names.emplace_back("onednn");
      notes.push_back(dc.impl);
#endif
      kernels::Conv2dOptions opt;
      opt.pad_h = opt.pad_w = 1;
      const kernels::PackedConvWeights packed = kernels::pack_conv_weights(w, t);
      fns.emplace_back([&] { kernels::conv2d(x, w, &b, y, opt); });
      names.emplace_back("mixprec");
      notes.emplace_back("weights packed per call");
      fns.emplace_back([&] { kernels::conv2d(x, packed, &b, y, opt); });
      names.emplace_back("mixprec-prepacked");
      notes.emplace_back("weights packed once (pack_conv_weights)");
      const std::vector<Timing> tms =
          time_interleaved(fns, 2, o.quick ? 7 : 25, o.quick ? 0.3 : 1.5);
      const bool have_peer = names.front() == "onednn";
      for (std::size_t i = 0; i < fns.size(); ++i)
        add(names[i].c_str(), tms[i], have_peer && i > 0 ? &tms[0] : nullptr, notes[i]);
    }
  }
  if (!o.json)
    std::printf(
        "CPU %s; %d-thread peak f32 FMA %.1f, bf16 vdpbf16ps %.1f, AMX %.1f GFLOP/s (bf16 rows: "
        "%% of %s)\n\n",
        cpu_features().model.c_str(), threads, peak_f32, peak_bf16_dot, peak_amx,
        amx ? "AMX" : "vdpbf16ps");
  print_table(rows, o);
  if (o.json) {
    char peak[96];
    std::snprintf(peak, sizeof peak, "{\"f32\": %.1f, \"bf16\": %.1f, \"amx\": %.1f}", peak_f32,
                  peak_bf16_dot, peak_amx);
    print_json("conv", rows, {{"peak_gflops_2t", peak}});
  }
  return 0;
}
