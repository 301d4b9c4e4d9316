// Video U-Net forward benchmark, mixprec's half of issue #6's side-by-side comparison with
// PyTorch (bench/peers/unet_video.py; tools/bench_unet_peer.py runs both).
//
// Builds a UNetVideo preset from a seed and writes, into --out DIR:
//   unet_<preset>.safetensors     the weights + architecture metadata (models::save_video_model)
//   unet_<preset>_io.safetensors  one input (x_t, context [1, 3, S, S] f32, timesteps [1] f32)
//                                 and mixprec's outputs for it, all stored as f32:
//                                 out.f32, out.bf16 (model.to(BF16), bf16 inputs: true half
//                                 precision), out.autocast_bf16 (f32 model under amp::Autocast)
// then times one forward per precision (InferenceMode; warm-up, then repetitions; median and
// spread) and prints a table, or JSON with --json. The autocast guard is made inside each timed
// forward, so every forward pays its weight casts (the peer script does the same).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/kernels/peak.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/models/unet_video.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/nn/init.h"

namespace {

using namespace mixprec;

struct Args {
  bench::Options o;
  std::string preset = "medium";
  uint64_t seed = 1;
  std::string out_dir = ".";
  int threads = 2;
  int size = 64;
  double timestep = 500;
  int warmup = 2;
  int reps = 10;
  bool time = true;
  bool dense = false;
};

const char* kUsage =
    "Usage: bench_unet_forward [--preset NAME] [--seed N] [--out DIR] [--threads N] [--size S]\n"
    "                          [--timestep T] [--warmup N] [--reps N] [--dense] [--no-time]\n"
    "                          [--quick] [--json]\n"
    "One UNetVideo forward (batch 1, S x S frames) in f32, bf16 (model.to(BF16)) and\n"
    "autocast-bf16: ms per forward and % of peak. Writes the weights and one input with\n"
    "mixprec's outputs into DIR for bench/peers/unet_video.py.\n"
    "  --preset    lightweight|medium|heavy|xl (medium)    --seed      weights seed (1)\n"
    "  --out       output directory (.)                    --threads   threads (2)\n"
    "  --size      frame height = width (64)               --timestep  diffusion step (500)\n"
    "  --warmup    untimed forwards (2)                    --reps      timed forwards (10)\n"
    "  --dense     every layer contributes: the near-zero-initialised convs (conv2, conv_out)\n"
    "              get the fan-in init and GroupNorm affine parameters random values, as in a\n"
    "              trained network (a harder precision check; same architecture and speed)\n"
    "  --no-time   only write the files                    --quick     --warmup 1 --reps 3\n"
    "  --json      print only the JSON results";

Args parse_args(int argc, char** argv) {
  Args a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value (see --help)\n", argv[0], argv[i]);
      std::exit(2);
    }
    return argv[++i];
  };
  auto number = [&](int& i) -> long long {
    const std::string flag = argv[i], v = value(i);
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0) {
      std::fprintf(stderr, "%s: %s expects a non-negative integer, got '%s'\n", argv[0],
                   flag.c_str(), v.c_str());
      std::exit(2);
    }
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    } else if (f == "--json") {
      a.o.json = true;
    } else if (f == "--quick") {
      a.o.quick = true;
      a.warmup = 1;
      a.reps = 3;
    } else if (f == "--dense") {
      a.dense = true;
    } else if (f == "--no-time") {
      a.time = false;
    } else if (f == "--preset") {
      a.preset = value(i);
    } else if (f == "--out") {
      a.out_dir = value(i);
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(number(i));
    } else if (f == "--threads") {
      a.threads = static_cast<int>(std::max(1LL, number(i)));
    } else if (f == "--size") {
      a.size = static_cast<int>(number(i));
    } else if (f == "--timestep") {
      a.timestep = static_cast<double>(number(i));
    } else if (f == "--warmup") {
      a.warmup = static_cast<int>(number(i));
    } else if (f == "--reps") {
      a.reps = static_cast<int>(std::max(1LL, number(i)));
    } else {
      std::fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], argv[i]);
      std::exit(2);
    }
  }
  return a;
}

// max|a - b| / max|b| and mean|a - b| / mean|b| over all elements (b is the reference).
struct RelError {
  double max_rel = 0, mean_rel = 0;
};

RelError rel_error(const Tensor& a, const Tensor& ref) {
  const Tensor x = a.to(DType::F32).contiguous(), y = ref.to(DType::F32).contiguous();
  const float* p = x.data<float>();
  const float* q = y.data<float>();
  double max_diff = 0, max_ref = 0, sum_diff = 0, sum_ref = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = std::fabs(double(p[i]) - double(q[i]));
    max_diff = std::max(max_diff, d);
    max_ref = std::max(max_ref, std::fabs(double(q[i])));
    sum_diff += d;
    sum_ref += std::fabs(double(q[i]));
  }
  return {max_diff / max_ref, sum_diff / sum_ref};
}

// UNetVideo starts its residual branches (conv2) and conv_out near zero, so at initialisation
// those layers barely touch the output. A trained network has no such layers: give them the
// fan-in init, and every GroupNorm a random scale and shift.
// The instruction a bf16 x bf16 product runs on at the active kernel level, and its peak: AMX
// tiles at the amx level; below it vdpbf16ps, or the f32 FMA where the core runs vdpbf16ps at
// half rate and the kernels widen (vdpbf16ps_at_half_rate); the f32 FMA below avx512bf16.
struct Bf16PathPeak {
  std::string unit;
  double gflops;
};
Bf16PathPeak bf16_path_peak(int threads, double peak_f32, double peak_bf16) {
  const IsaLevel level = active_isa();
  if (level >= IsaLevel::Amx)
    return {"AMX tdpbf16ps", kernels::measure_peak_gflops(kernels::PeakKind::AmxBf16, threads)};
  if (level >= IsaLevel::Avx512Bf16 && !vdpbf16ps_at_half_rate()) return {"vdpbf16ps", peak_bf16};
  return {"f32 FMA", peak_f32};
}

void densify(models::UNetVideo& model, Generator& gen) {
  auto ends_with = [](const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const auto& [name, p] : model.named_parameters()) {
    if (ends_with(name, "conv2.weight") || name == "conv_out.weight") {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.numel() / p.size(0)));
      nn::init::uniform_(p, -bound, bound, gen);
    } else if (name.find("norm") != std::string::npos && ends_with(name, ".weight")) {
      nn::init::uniform_(p, 0.5, 1.5, gen);
    } else if (name.find("norm") != std::string::npos && ends_with(name, ".bias")) {
      nn::init::uniform_(p, -0.5, 0.5, gen);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mixprec;
  using namespace mixprec::bench;
  const Args a = parse_args(argc, argv);
  try {
    set_num_threads(a.threads);
    const int threads = num_threads();
    std::filesystem::create_directories(a.out_dir);
    const std::string weights_path = a.out_dir + "/unet_" + a.preset + ".safetensors";
    const std::string io_path = a.out_dir + "/unet_" + a.preset + "_io.safetensors";

    Generator gen(a.seed);
    models::UNetVideo model(models::UNetVideoConfig::preset(a.preset), gen);
    if (a.dense) densify(model, gen);
    models::VideoModelInfo info;
    info.config = model.config();
    info.extra = {{"written_by", "bench_unet_forward"},
                  {"seed", std::to_string(a.seed)},
                  {"init", a.dense ? "dense" : "default"}};
    models::save_video_model(weights_path, model, info);

    Generator input_gen(a.seed + 1000);
    const int64_t s = a.size;
    const Tensor x_t = Tensor::randn({1, 3, s, s}, input_gen);
    const Tensor context = Tensor::randn({1, 3, s, s}, input_gen);
    const Tensor timesteps = Tensor::full({1}, a.timestep);
    const Tensor x_bf16 = x_t.to(DType::BF16), context_bf16 = context.to(DType::BF16);

    InferenceMode inference;
    auto forward_f32 = [&] { return model.forward(x_t, context, timesteps); };
    auto forward_autocast = [&] {
      amp::Autocast on(DType::BF16);
      return model.forward(x_t, context, timesteps);
    };
    auto forward_bf16 = [&] { return model.forward(x_bf16, context_bf16, timesteps); };

    // Outputs first (f32 model), then timings; the bf16 model is the same one converted.
    const Tensor out_f32 = forward_f32().to(DType::F32);
    const Tensor out_autocast = forward_autocast().to(DType::F32);
    std::vector<Timing> timings;
    if (a.time) {
      timings.push_back(time_it(forward_f32, a.warmup, a.reps, 0));
      timings.push_back(time_it(forward_autocast, a.warmup, a.reps, 0));
    }
    model.to(DType::BF16);
    const Tensor out_bf16 = forward_bf16().to(DType::F32);
    if (a.time) timings.push_back(time_it(forward_bf16, a.warmup, a.reps, 0));

    io::save_safetensors(io_path,
                         {{"x_t", x_t},
                          {"context", context},
                          {"timesteps", timesteps},
                          {"out.f32", out_f32},
                          {"out.bf16", out_bf16},
                          {"out.autocast_bf16", out_autocast}},
                         {{"preset", a.preset},
                          {"seed", std::to_string(a.seed)},
                          {"init", a.dense ? "dense" : "default"},
                          {"weights", weights_path}});

    const double gflop = model.gflop_per_forward(s, s);
    const double peak_f32 = kernels::measure_peak_gflops(kernels::PeakKind::F32Fma, threads);
    const double peak_bf16 = isa_supported(IsaLevel::Avx512Bf16)
                                 ? kernels::measure_peak_gflops(kernels::PeakKind::Bf16Dot, threads)
                                 : peak_f32;
    // The ceiling of the bf16 rows at the active level: the instruction their products run on.
    const Bf16PathPeak path = bf16_path_peak(threads, peak_f32, peak_bf16);
    struct Config {
      const char* name;
      const char* dtype;
      const Tensor* out;
    };
    const Config configs[] = {{"mixprec f32", "f32", &out_f32},
                              {"mixprec autocast-bf16", "bf16", &out_autocast},
                              {"mixprec bf16", "bf16", &out_bf16}};
    std::vector<Row> rows;
    for (std::size_t i = 0; i < 3; ++i) {
      const RelError e = rel_error(*configs[i].out, out_f32);
      Row r;
      r.text("config", configs[i].name).text("compute", configs[i].dtype);
      if (a.time) {
        const Timing& t = timings[i];
        const double gflops = gflop / t.median_s;
        r.num("ms", t.median_s * 1e3, 2)
            .num("min_ms", t.min_s * 1e3, 2)
            .num("max_ms", t.max_s * 1e3, 2)
            .num("reps", t.reps, 0)
            .num("gflops", gflops, 1)
            .num("pct_bf16_peak", 100 * gflops / peak_bf16, 1)
            .num("pct_f32_peak", 100 * gflops / peak_f32, 1);
      }
      r.num("max_rel_vs_mixprec_f32", e.max_rel, 6).num("mean_rel_vs_mixprec_f32", e.mean_rel, 6);
      rows.push_back(r);
    }
    if (!a.o.json)
      std::printf(
          "UNetVideo '%s' (%lld parameters, seed %llu%s), 1 x 3 x %d x %d, %.2f GFLOP/forward\n"
          "CPU %s; %d threads; peak f32 %.1f, bf16 %.1f, the bf16 rows' (%s) %.1f GFLOP/s; "
          "warm-up %d, reps %d\n"
          "wrote %s and %s\n\n",
          a.preset.c_str(), static_cast<long long>(model.parameter_count()),
          static_cast<unsigned long long>(a.seed), a.dense ? ", dense init" : "", a.size, a.size,
          gflop, cpu_features().model.c_str(), threads, peak_f32, peak_bf16, path.unit.c_str(),
          path.gflops, a.warmup, a.reps,
          weights_path.c_str(), io_path.c_str());
    print_table(rows, a.o);
    if (a.o.json) {
      char extra[256];
      std::snprintf(extra, sizeof extra,
                    "{\"f32\": %.1f, \"bf16\": %.1f, \"bf16_path\": %.1f, \"bf16_path_unit\": %s}",
                    peak_f32, peak_bf16, path.gflops, io::json_quote(path.unit).c_str());
      print_json("unet_forward", rows,
                 {{"preset", io::json_quote(a.preset)},
                  {"seed", std::to_string(a.seed)},
                  {"init", io::json_quote(a.dense ? "dense" : "default")},
                  {"threads", std::to_string(threads)},
                  {"size", std::to_string(a.size)},
                  {"gflop_per_forward", std::to_string(gflop)},
                  {"warmup", std::to_string(a.warmup)},
                  {"weights", io::json_quote(weights_path)},
                  {"io", io::json_quote(io_path)},
                  {"peak_gflops", extra}});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_unet_forward: %s\n", e.what());
    return 1;
  }
  return 0;
}
