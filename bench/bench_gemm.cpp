// GEMM benchmark: own f32 / bf16 / f16 next to oneDNN f32 and bf16 matmul and OpenBLAS sgemm,
// side by side in one run, reported as GFLOP/s and % of this machine's measured peak.
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/kernels/convert.h"
#include "mixprec/kernels/gemm.h"
#include "mixprec/kernels/peak.h"

#ifdef MIXPREC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef MIXPREC_HAVE_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
#endif

namespace mixprec::bench {
namespace {

using kernels::MatrixView;
using kernels::MutableMatrixView;

struct Shape {
  const char* name;
  int64_t m, n, k;  // C[m, n] = A[m, k] B[k, n]
};

struct Operands {
  std::vector<unsigned char> a, b, c;
  Operands(const Shape& s, DType t) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    auto fill = [&](std::vector<unsigned char>& v, int64_t n) {
      std::vector<float> f(static_cast<std::size_t>(n));
      for (float& x : f) x = d(rng);
      v.resize(static_cast<std::size_t>(n) * dtype_size(t));
      kernels::convert(f.data(), DType::F32, v.data(), t, f.size());
    };
    fill(a, s.m * s.k);
    fill(b, s.k * s.n);
    c.resize(static_cast<std::size_t>(s.m * s.n) * dtype_size(t));
  }
};

struct Peaks {
  double f32[3] = {0, 0, 0};  // by thread count
  double bf16[3] = {0, 0, 0};
  double amx[3] = {0, 0, 0};  // AMX tiles (0 where absent); the AMX rows' percentage
};

#ifdef MIXPREC_HAVE_DNNL
// oneDNN matmul with plain row-major layouts (it packs internally per call, as we do).
struct DnnlMatmul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
  DnnlMatmul(const Shape& s, DType t, Operands& ops) {
    using tag = dnnl::memory::format_tag;
    const auto dt = t == DType::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    const dnnl::memory::desc a_md({s.m, s.k}, dt, tag::ab), b_md({s.k, s.n}, dt, tag::ab),
        c_md({s.m, s.n}, dt, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    a = dnnl::memory(a_md, engine, ops.a.data());
    b = dnnl::memory(b_md, engine, ops.b.data());
    c = dnnl::memory(c_md, engine, ops.c.data());
  }
  void run() {
    prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};
#endif

void bench_shape(const Shape& s, int threads, const Peaks& peaks, const Options& o,
                 std::vector<Row>& rows) {
  set_num_threads(threads);
  omp_set_num_threads(threads);
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  const double min_s = o.quick ? 0.15 : 0.5;

  // Median and best of interleaved rounds: on a shared machine the median carries other jobs'
  // load, the best is the uncontended speed; both ratios to oneDNN are printed.
  auto add = [&](const char* impl, const char* dtype, const Timing& t, double peak,
                 const Timing* peer, const std::string& note) {
    const double ms = t.median_s * 1e3;
    const double gflops = flops / t.median_s / 1e9;
    Row r;
    r.text("shape", s.name)
        .num("m", double(s.m), 0)
        .num("n", double(s.n), 0)
        .num("k", double(s.k), 0);
    r.num("threads", threads, 0).text("impl", impl).text("dtype", dtype);
    r.num("ms", ms, 3).num("spread_ms", (t.max_s - t.min_s) * 1e3, 3).num("gflops", gflops, 1);
    r.num("pct_peak", 100.0 * gflops / peak, 1);
    r.num("vs_onednn", peer != nullptr ? peer->median_s / t.median_s : NAN, 2);
    r.num("best_gflops", flops / t.min_s / 1e9, 1);
    r.num("best_vs_onednn", peer != nullptr ? peer->min_s / t.min_s : NAN, 2);
    r.text("note", note);
    rows.push_back(r);
  };

  Timing dnnl_f32;
  bool have_dnnl_f32 = false;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    Operands ops(s, t);
    const MatrixView av = MatrixView::row_major(ops.a.data(), t, s.m, s.k, s.k);
    const MatrixView bv = MatrixView::row_major(ops.b.data(), t, s.k, s.n, s.n);
    const MutableMatrixView cv = MutableMatrixView::row_major(ops.c.data(), t, s.m, s.n, s.n);
    const bool amx = t == DType::BF16 && active_isa() >= IsaLevel::Amx && s.k % 32 == 0;
    const double peak = amx ? peaks.amx[threads]
                        : t == DType::BF16 && active_isa() >= IsaLevel::Avx512Bf16
                            ? peaks.bf16[threads]
                            : peaks.f32[threads];
    const std::string dt(dtype_name(t));
    const kernels::PackedMatrix packed = kernels::pack_b(bv, t);
    std::vector<std::function<void()>> fns;
    std::vector<std::string> names, notes;
#ifdef MIXPREC_HAVE_DNNL
    std::unique_ptr<DnnlMatmul> dm;
    if (t != DType::F16) {
      dm = std::make_unique<DnnlMatmul>(s, t, ops);
      fns.emplace_back([&] { dm->run(); });
      names.emplace_back("onednn");
      notes.push_back(dm->impl);
    }
#endif
    fns.emplace_back([&] { kernels::gemm(av, bv, cv); });
    names.emplace_back("mixprec");
    notes.emplace_back(t == DType::F16 ? "f16 converted to f32 while packing; vs oneDNN f32"
                       : t == DType::BF16 && active_isa() >= IsaLevel::Amx && s.k % 32 == 0
                           ? "AMX tiles"
                           : "");
    fns.emplace_back([&] { kernels::gemm_prepacked(av, packed, cv); });
    names.emplace_back("mixprec-prepacked");
    notes.emplace_back("B packed once (inference weights)");
    if (t == DType::BF16 && active_isa() >= IsaLevel::Amx) {
      fns.emplace_back([&] {
        const ScopedIsa below_amx(IsaLevel::Avx512Bf16);
        kernels::gemm(av, bv, cv);
      });
      names.emplace_back("mixprec-vdpbf16ps");
      notes.emplace_back("avx512bf16 level: the vdpbf16ps micro-kernel");
    }
#ifdef MIXPREC_HAVE_OPENBLAS
    const float* a32 = reinterpret_cast<const float*>(ops.a.data());
    const float* b32 = reinterpret_cast<const float*>(ops.b.data());
    float* c32 = reinterpret_cast<float*>(ops.c.data());
    if (t == DType::F32) {
      openblas_set_num_threads(threads);
      fns.emplace_back([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m),
                    static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a32, static_cast<int>(s.k),
                    b32, static_cast<int>(s.n), 0.0f, c32, static_cast<int>(s.n));
      });
      names.emplace_back("openblas");
      notes.push_back(std::string("core ") + openblas_get_corename());
    }
#endif
    const std::vector<Timing> tms = time_interleaved(fns, 2, o.quick ? 5 : 11, min_s * fns.size());
    const bool have_peer = names.front() == "onednn";
    if (t == DType::F32 && have_peer) {
      dnnl_f32 = tms[0];
      have_dnnl_f32 = true;
    }
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const Timing* peer = have_peer && i > 0                 ? &tms[0]
                           : t == DType::F16 && have_dnnl_f32 ? &dnnl_f32
                                                              : nullptr;
      const bool f32_row = names[i] == "openblas";
      const bool dot_row = names[i] == "mixprec-vdpbf16ps";
      add(names[i].c_str(), f32_row ? "f32" : dt.c_str(), tms[i],
          f32_row   ? peaks.f32[threads]
          : dot_row ? peaks.bf16[threads]
                    : peak,
          peer, notes[i]);
    }
  }
}

}  // namespace
}  // namespace mixprec::bench

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  run_openmp_passive(argv);
  const Options o = parse_options(
      argc, argv,
      "Usage: bench_gemm [--quick] [--json] [--threads N]\n"
      "GEMM GFLOP/s: mixprec f32/bf16/f16 vs oneDNN f32/bf16 vs OpenBLAS sgemm, 1 and 2 threads,\n"
      "as %% of the measured f32-FMA / bf16-dot peak. For the OpenBLAS column run it with\n"
      "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (make bench does).");
  const std::vector<Shape> shapes_full = {{"square256", 256, 256, 256},
                                          {"square512", 512, 512, 512},
                                          {"square1024", 1024, 1024, 1024},
                                          {"square2048", 2048, 2048, 2048},
                                          {"ffn_up 512x3072x768", 512, 3072, 768},
                                          {"ffn_down 512x768x3072", 512, 768, 3072},
                                          {"conv_im2col 4096x64x576", 4096, 64, 576}};
  const std::vector<Shape> shapes_quick = {shapes_full[1], shapes_full[5], shapes_full[6]};
  const std::vector<Shape>& shapes = o.quick ? shapes_quick : shapes_full;
  const std::vector<int> thread_counts = o.threads > 0 ? std::vector<int>{o.threads}
                                         : o.quick     ? std::vector<int>{2}
                                                       : std::vector<int>{1, 2};

  Peaks peaks;
  std::vector<Row> peak_rows;
  for (int t : {1, 2}) {
    peaks.f32[t] = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, t);
    peaks.amx[t] = active_isa() >= IsaLevel::Amx
                       ? kernels::measure_peak_gflops(kernels::PeakKind::AmxBf16, t)
                       : 0.0;
    peaks.bf16[t] = isa_supported(IsaLevel::Avx512Bf16)
                        ? kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, t)
                        : peaks.f32[t];
    Row r;
    r.num("threads", t, 0)
        .num("peak_f32_gflops", peaks.f32[t], 1)
        .num("peak_bf16_gflops", peaks.bf16[t], 1)
        .num("peak_amx_gflops", peaks.amx[t], 1);
    peak_rows.push_back(r);
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  if (!o.json) {
    std::printf("CPU %s, kernel level %.*s; OPENBLAS_CORETYPE %s\n\nMeasured peak:\n",
                cpu_features().model.c_str(), static_cast<int>(isa_name(active_isa()).size()),
                isa_name(active_isa()).data(), coretype ? coretype : "unset");
    print_table(peak_rows, o);
    std::printf("\n");
  }
  std::vector<Row> rows;
  for (const Shape& s : shapes)
    for (int t : thread_counts) {
      bench_shape(s, t, peaks, o, rows);
      if (!o.json) std::fprintf(stderr, "  done %s, %d thread(s)\n", s.name, t);
    }
  print_table(rows, o);
  if (o.json) {
    char peak[160];
    std::snprintf(peak, sizeof peak,
                  "{\"f32_1t\": %.1f, \"f32_2t\": %.1f, \"bf16_1t\": %.1f, \"bf16_2t\": %.1f}",
                  peaks.f32[1], peaks.f32[2], peaks.bf16[1], peaks.bf16[2]);
    print_json("gemm", rows,
               {{"peak_gflops", peak},
                {"openblas_coretype", io::json_quote(coretype ? coretype : "unset")}});
  }
  return 0;
}
