// `mixprec bench video`: the benchmark matrix of seed document 000 — precisions x presets x
// DDIM steps — for frame-by-frame video generation; with --load N, the latency of one stream at
// 1 thread and at all threads, on a quiet machine and beside N busy processes it starts itself. Every configuration runs in its own child
// process (this binary with --run-one), so its peak RSS is its own and one configuration's
// caches and threads cannot flatter the next. The parent gathers the results, compares each
// with fp32 (speedup, memory, PSNR of the same stream), saves or compares a baseline, and writes
// a Markdown report and an SVG chart.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "cli_args.h"
#include "commands.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/parallel.h"
#include "mixprec/data/moving_shapes.h"
#include "mixprec/io/json.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/kernels/peak.h"
#include "mixprec/models/video_diffusion.h"
#include "mixprec/models/video_streams.h"
#include "mixprec/models/video_model_file.h"
#include "mixprec/models/video_quality.h"
#include "busy_load.h"
#include "run_guard.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

struct Result {
  std::string preset, precision;
  int64_t steps = 0;
  double p50 = 0, p95 = 0, p99 = 0, spread = 0;  // ms/frame
  double peak_alloc_mib = 0, rss_mib = 0, gflop_per_frame = 0;
  int64_t params = 0;
  bool trained = false;
  std::string frames_file;  // frame 1 and frame K for the PSNR against fp32
  // Filled in by the parent:
  double speedup = NAN, memory_reduction = NAN, psnr_first = NAN, psnr_last = NAN, ssim_last = NAN,
         pct_peak = NAN;
  std::string key() const { return preset + "/" + precision + "/" + std::to_string(steps); }
};

// ---- one configuration, in a child process ----

struct RunOne {
  std::string preset, precision, checkpoint, frames_out;
  int64_t steps = 4, frames = 20, warmup = 3, quality_frame = 20, seed = 0;
};

std::unique_ptr<models::UNetVideo> make_model(const std::string& preset,
                                              const std::string& checkpoint,
                                              models::VideoModelInfo& info, bool& trained) {
  if (!checkpoint.empty() && std::filesystem::exists(checkpoint)) {
    auto model = models::load_video_model(checkpoint, &info);
    if (info.config.name == preset) {
      trained = true;
      return model;
    }
  }
  trained = false;
  info = models::VideoModelInfo{};
  info.config = models::UNetVideoConfig::preset(preset);
  Generator gen(1234);  // untrained: the same random weights in every child
  return std::make_unique<models::UNetVideo>(info.config, gen);
}

// Whether `checkpoint` is a trained model of `preset` that predicts each frame directly: one
// forward per frame, whatever number of DDIM steps is asked for.
bool direct_checkpoint(const std::string& preset, const std::string& checkpoint) {
  models::VideoModelInfo info;
  bool trained = false;
  (void)make_model(preset, checkpoint, info, trained);
  return trained && info.prediction == models::Prediction::Direct;
}

// The configuration's model in its precision, and streams of it from the first held-out video.
struct BenchModel {
  InferencePrecision prec;
  models::VideoModelInfo info;
  bool trained = false;
  std::unique_ptr<models::UNetVideo> model;
  Tensor start;

  explicit BenchModel(const RunOne& o) : prec(parse_inference_precision(o.precision)) {
    model = make_model(o.preset, o.checkpoint, info, trained);
    apply_precision(*model, prec);
    start = data::MovingShapes({}, 0).clip(data::MovingShapesConfig{}.held_out(0), 0,
                                           model->config().context_frames);
  }
  std::unique_ptr<models::VideoStream> stream(const RunOne& o, bool graph) const {
    models::StreamRequest request{.steps = o.steps, .seed = o.seed};
    request.graph = graph;
    return std::make_unique<models::VideoStream>(
        *model, models::NoiseSchedule::cosine(info.schedule_steps), start,
        stream_options(info, o.checkpoint, request));
  }
};

int run_one(const RunOne& o) {
  const BenchModel bench(o);
  const InferencePrecision& prec = bench.prec;
  const bool trained = bench.trained;
  const auto& model = bench.model;
  // The network's forwards per frame: a direct model runs once, a diffusion model once a step.
  const int64_t forwards = bench.info.prediction == models::Prediction::Direct ? 1 : o.steps;
  const std::unique_ptr<models::VideoStream> owned = bench.stream(o, false);
  models::VideoStream& stream = *owned;
  // The peak counts the weights too: what a deployment must hold.
  CachingAllocator::global().reset_peak();
  std::vector<double> ms;
  io::NamedTensors keep;
  const int64_t total = std::max(o.warmup + o.frames, o.quality_frame);
  for (int64_t i = 0; i < total; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor frame;
    {
      amp::Autocast autocast(prec.autocast_dtype, prec.autocast);
      frame = stream.next();
    }
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= o.warmup && i < o.warmup + o.frames) ms.push_back(t);
    if (i == 0) keep.emplace_back("frame_first", frame.contiguous());
    if (i + 1 == o.quality_frame) keep.emplace_back("frame_last", frame.contiguous());
  }
  if (!o.frames_out.empty()) io::save_safetensors(o.frames_out, keep);
  double sum = 0;
  for (double v : ms) sum += v;
  std::printf(
      "{\"preset\": \"%s\", \"precision\": \"%s\", \"steps\": %lld, \"p50\": %.4f, \"p95\": "
      "%.4f, \"p99\": %.4f, \"mean\": %.4f, \"min\": %.4f, \"max\": %.4f, \"spread\": %.4f, "
      "\"peak_alloc_mib\": %.3f, \"rss_mib\": %.2f, \"gflop_per_frame\": %.4f, \"params\": "
      "%lld, \"trained\": %s}\n",
      o.preset.c_str(), prec.name.c_str(), static_cast<long long>(forwards), median(ms),
      percentile(ms, 95), percentile(ms, 99), sum / static_cast<double>(ms.size()),
      *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()),
      percentile(ms, 75) - percentile(ms, 25),
      static_cast<double>(CachingAllocator::global().stats().peak_allocated_bytes) / (1 << 20),
      static_cast<double>(peak_rss_bytes()) / (1 << 20),
      model->gflop_per_forward(64, 64) * static_cast<double>(forwards),
      static_cast<long long>(model->parameter_count()), trained ? "true" : "false");
  return 0;
}

// Eager against graph replay (graph/graph.h), side by side in one process: two streams of the
// same model from the same start and seed, their frames generated alternately, so the machine's
// noise falls on both. Their frames must agree bit for bit.
void write_file(const std::string& path, const std::string& text);

int run_graph_compare(const RunOne& o, bool json, const std::string& dump) {
  const BenchModel bench(o);
  const InferencePrecision& prec = bench.prec;
  auto eager = bench.stream(o, false), replay = bench.stream(o, true);
  std::vector<double> eager_ms, replay_ms;
  int64_t identical = 0;
  auto timed = [&](models::VideoStream& stream, Tensor& frame) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      amp::Autocast autocast(prec.autocast_dtype, prec.autocast);
      frame = stream.next();
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int64_t i = 0; i < o.warmup + o.frames; ++i) {
    Tensor a, b;
    // Alternate which goes first, so neither always runs on a cache the other warmed.
    const double ta = i % 2 == 0 ? timed(*eager, a) : 0, tb = timed(*replay, b);
    const double ta2 = i % 2 == 1 ? timed(*eager, a) : ta;
    if (i < o.warmup) continue;
    eager_ms.push_back(ta2);
    replay_ms.push_back(tb);
    const Tensor x = a.contiguous(), y = b.contiguous();
    identical += x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
  }
  const graph::Graph& g = *replay->sampler_graph();
  const graph::MemoryPlan& m = g.memory();
  if (!dump.empty()) {
    write_file(dump + ".txt", g.to_string(g.kernel_times(20)));
    write_file(dump + ".dot", g.to_dot());
  }
  const double ratio = median(eager_ms) / median(replay_ms);
  const double mib = 1.0 / (1 << 20);
  if (json) {
    std::printf(
        "{\"preset\": \"%s\", \"precision\": \"%s\", \"steps\": %lld, \"threads\": %d, "
        "\"eager_p50\": %.4f, \"eager_p99\": %.4f, \"graph_p50\": %.4f, \"graph_p99\": %.4f, "
        "\"speedup\": %.4f, \"kernels\": %zu, \"arena_mib\": %.4f, \"arena_input_mib\": %.4f, "
        "\"eager_peak_mib\": %.4f, \"identical_frames\": %lld, \"frames\": %lld}\n",
        o.preset.c_str(), prec.name.c_str(), static_cast<long long>(o.steps), num_threads(),
        median(eager_ms), percentile(eager_ms, 99), median(replay_ms), percentile(replay_ms, 99),
        ratio, g.size(), static_cast<double>(m.arena_bytes) * mib,
        static_cast<double>(m.input_bytes) * mib,
        static_cast<double>(m.eager_peak_bytes) * mib, static_cast<long long>(identical),
        static_cast<long long>(o.frames));
    return identical == o.frames ? 0 : 1;
  }
  std::printf("%s %s, %lld steps, %d thread(s), %lld frames each (eager and replay alternating)\n\n",
              o.preset.c_str(), prec.name.c_str(), static_cast<long long>(o.steps), num_threads(),
              static_cast<long long>(o.frames));
  std::printf("| mode | ms/frame p50 | p99 | FPS |\n|---|---|---|---|\n");
  std::printf("| eager | %.2f | %.2f | %.1f |\n", median(eager_ms), percentile(eager_ms, 99),
              1000.0 / median(eager_ms));
  std::printf("| graph replay | %.2f | %.2f | %.1f |\n\n", median(replay_ms),
              percentile(replay_ms, 99), 1000.0 / median(replay_ms));
  std::printf("replay speedup (p50): %.3fx; %zu kernels per frame (%zu dropped as dead code, %zu "
              "folded into constants, %zu upsamples read through by convolutions, %zu "
              "concatenation copies written by convolutions, %zu activations, adds and casts folded "
              "into their producer)\n",
              ratio, g.size(), g.eliminated(), g.folded(), g.fused_upsamples(), g.elided_copies(),
              g.fused_epilogues());
  // A replay runs the kernels alone: what eager spends beyond it is the framework (op
  // front-ends, autocast, allocation, dispatch to the kernel).
  std::printf("framework overhead of eager (1 - replay / eager, p50): %.1f%%\n",
              100.0 * (1.0 - median(replay_ms) / median(eager_ms)));
  // The eager peak counts what the function allocates, not the inputs it is given; the arena
  // also holds the graph's own copies of the inputs. Both comparisons are printed.
  const auto eager_peak = static_cast<double>(m.eager_peak_bytes);
  std::printf("memory: arena %.2f MiB (inputs %.3f; most alive at once %.2f; %zu kernels in "
              "place) vs eager peak %.2f MiB = %.1f%%; without the input copies, as the eager "
              "peak is counted: %.2f MiB = %.1f%%\n",
              static_cast<double>(m.arena_bytes) * mib, static_cast<double>(m.input_bytes) * mib,
              static_cast<double>(m.live_peak_bytes) * mib, m.in_place, eager_peak * mib,
              100.0 * static_cast<double>(m.arena_bytes) / eager_peak,
              static_cast<double>(m.arena_bytes - m.input_bytes) * mib,
              100.0 * static_cast<double>(m.arena_bytes - m.input_bytes) / eager_peak);
  std::printf("frames bit-identical to eager: %lld of %lld\n\n", static_cast<long long>(identical),
              static_cast<long long>(o.frames));
  std::printf("| kernel | count | ms per frame |\n|---|---|---|\n");
  double total = 0;
  for (const graph::Graph::OpTime& t : g.profile(20)) {
    std::printf("| %s | %d | %.3f |\n", t.op.c_str(), t.count, t.ms);
    total += t.ms;
  }
  std::printf("| all | %zu | %.3f |\n", g.size(), total);
  return identical == o.frames ? 0 : 1;
}

// ---- the parent ----

Result parse_result(const std::string& line) {
  const io::JsonValue v = io::parse_json(line);
  const ChildResult child{v, "bench video"};
  Result r;
  r.preset = child.text("preset");
  r.precision = child.text("precision");
  r.steps = static_cast<int64_t>(child.number("steps"));
  r.p50 = child.number("p50");
  r.p95 = child.number("p95");
  r.p99 = child.number("p99");
  r.spread = child.number("spread");
  r.peak_alloc_mib = child.number("peak_alloc_mib");
  r.rss_mib = child.number("rss_mib");
  r.gflop_per_frame = child.number("gflop_per_frame");
  r.params = static_cast<int64_t>(child.number("params"));
  r.trained = child.member("trained").as_bool();
  return r;
}

// The machine's bf16 peak as the kernels reach it: AMX tiles where usable, else vdpbf16ps,
// else f32 FMA (a CPU without bf16 math converts and computes in f32).
struct Peak {
  double gflops;
  const char* what;
};
Peak bf16_peak() {
  using kernels::PeakKind;
  for (const auto& [kind, what] :
       {std::pair{PeakKind::AmxBf16, "AMX tdpbf16ps"}, std::pair{PeakKind::Bf16Dot, "vdpbf16ps"},
        std::pair{PeakKind::F32Fma, "f32 FMA"}}) {
    try {
      return {kernels::measure_peak_gflops(kind, num_threads()), what};
    } catch (const Error&) {  // this CPU lacks the instruction: try the next
    }
  }
  throw Error("[bench video] no peak probe runs on this CPU");
}

std::string json_of(const std::vector<Result>& results, double peak_bf16) {
  std::ostringstream s;
  s << "{\"bf16_peak_gflops\": " << peak_bf16 << ", \"results\": [";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    auto num = [](double v) { return std::isfinite(v) ? std::to_string(v) : std::string("null"); };
    s << (i ? ", " : "") << "{\"preset\": \"" << r.preset << "\", \"precision\": \"" << r.precision
      << "\", \"steps\": " << r.steps << ", \"ms_p50\": " << r.p50 << ", \"ms_p95\": " << r.p95
      << ", \"ms_p99\": " << r.p99 << ", \"ms_spread\": " << r.spread
      << ", \"fps\": " << 1000.0 / r.p50 << ", \"peak_alloc_mib\": " << r.peak_alloc_mib
      << ", \"rss_mib\": " << r.rss_mib << ", \"speedup_vs_fp32\": " << num(r.speedup)
      << ", \"memory_reduction_pct\": " << num(r.memory_reduction)
      << ", \"psnr_vs_fp32_first\": " << num(r.psnr_first)
      << ", \"psnr_vs_fp32_last\": " << num(r.psnr_last)
      << ", \"ssim_vs_fp32_last\": " << num(r.ssim_last)
      << ", \"gflop_per_frame\": " << r.gflop_per_frame
      << ", \"pct_of_bf16_peak\": " << num(r.pct_peak) << ", \"params\": " << r.params
      << ", \"trained\": " << (r.trained ? "true" : "false") << "}";
  }
  s << "]}";
  return s.str();
}

std::string markdown_of(const std::vector<Result>& results, const Peak& peak,
                        int64_t quality_frame) {
  std::ostringstream s;
  s << "| preset | precision | steps | ms/frame p50 | p95 | p99 | FPS | alloc peak MiB | RSS MiB "
       "| speedup | mem -% | PSNR f1 | PSNR f"
    << quality_frame
    << " | % bf16 peak |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  char row[512];
  for (const Result& r : results) {
    std::snprintf(row, sizeof row,
                  "| %s%s | %s | %lld | %.2f | %.2f | %.2f | %.1f | %.1f | %.0f | %.2fx | %.0f | "
                  "%.1f | %.1f | %.1f |\n",
                  r.preset.c_str(), r.trained ? "" : " (untrained)", r.precision.c_str(),
                  static_cast<long long>(r.steps), r.p50, r.p95, r.p99, 1000.0 / r.p50,
                  r.peak_alloc_mib, r.rss_mib, r.speedup, r.memory_reduction, r.psnr_first,
                  r.psnr_last, r.pct_peak);
    s << row;
  }
  s << "\nbf16 peak (" << peak.what << " probe, all threads): " << peak.gflops
    << " GFLOP/s. PSNR is against "
    << "the fp32 stream with the same weights and noise (inf: identical).\n";
  return s.str();
}

// A horizontal bar chart of p50 ms/frame with the 40 ms and 16 ms targets.
std::string svg_of(const std::vector<Result>& results) {
  const double row = 22, left = 260, width = 520;
  double max_ms = 45;
  for (const Result& r : results) max_ms = std::max(max_ms, r.p50 * 1.1);
  const double height = 60 + row * static_cast<double>(results.size());
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << left + width + 80 << "' height='"
    << height << "' font-family='sans-serif' font-size='12'>\n"
    << "<text x='10' y='18' font-size='14'>mixprec bench video: ms/frame (p50), lower is "
       "better</text>\n";
  auto x_of = [&](double ms) { return left + width * ms / max_ms; };
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double y = 35 + row * static_cast<double>(i);
    const char* colour = r.precision.find("fp32") != std::string::npos   ? "#7f7f7f"
                         : r.precision.find("fp16") != std::string::npos ? "#1f77b4"
                                                                         : "#d62728";
    s << "<text x='10' y='" << y + 14 << "'>" << r.preset << " " << r.precision << " " << r.steps
      << " steps</text>\n<rect x='" << left << "' y='" << y + 3 << "' width='" << x_of(r.p50) - left
      << "' height='" << row - 6 << "' fill='" << colour << "'/>\n<text x='" << x_of(r.p50) + 4
      << "' y='" << y + 14 << "'>" << std::round(r.p50 * 10) / 10 << "</text>\n";
  }
  for (double target : {16.0, 40.0})
    s << "<line x1='" << x_of(target) << "' y1='28' x2='" << x_of(target) << "' y2='" << height - 10
      << "' stroke='black' stroke-dasharray='4 3'/>\n<text x='" << x_of(target) + 3 << "' y='"
      << height - 12 << "'>" << target << " ms</text>\n";
  s << "</svg>\n";
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw Error("[bench video] could not write " + path);
}


// ---- --load: latency beside busy competitors ----

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return f ? one + " " + five + " " + fifteen : std::string("unknown");
}

// One stream (the first preset, precision and steps) at 1 thread and at all threads, quiet and
// beside `load` busy processes, each configuration in its own child as in the matrix. `rounds`
// rounds per load, the thread counts in alternating order (1, all; all, 1; ...), so a drift of
// the machine or the competitor's settling hits both alike; the table gives the median over the
// rounds, and the 2-thread / 1-thread ratios are taken within each round (side by side).
int run_latency(const RunOne& o, int64_t load, int64_t rounds, bool json) {
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  const int all = num_threads();
  std::vector<int> thread_counts{1};
  if (all > 1) thread_counts.push_back(all);
  std::vector<int64_t> loads{0};
  if (load > 0) loads.push_back(load);
  struct Row {
    int64_t load;
    int threads;
    std::vector<Result> rounds;  // one per round
  };
  std::vector<Row> rows;
  const std::string before = load_average();
  for (int64_t l : loads) {
    const BusyLoad busy(l, "bench video");
    const std::size_t first = rows.size();
    for (int t : thread_counts) rows.push_back({l, t, {}});
    for (int64_t r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < thread_counts.size(); ++i) {
        Row& row = rows[first + (r % 2 == 0 ? i : thread_counts.size() - 1 - i)];
        std::ostringstream cmd;
        cmd << "MIXPREC_NUM_THREADS=" << row.threads << " '" << self
            << "' bench video --run-one --presets " << o.preset << " --precisions " << o.precision
            << " --steps " << o.steps << " --frames " << o.frames << " --warmup " << o.warmup
            << " --quality-frame 1 --seed " << o.seed << " --checkpoint '" << o.checkpoint << "'";
        std::fprintf(stderr, "bench video: %s %s, %lld steps, %d thread(s), %lld busy, round %lld/%lld ...\n",
                     o.preset.c_str(), o.precision.c_str(), static_cast<long long>(o.steps),
                     row.threads, static_cast<long long>(l), static_cast<long long>(r + 1),
                     static_cast<long long>(rounds));
        row.rounds.push_back(parse_result(run_and_capture(cmd.str(), "bench video")));
      }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  auto of_rounds = [&](const Row& row, double Result::*field) {
    std::vector<double> v;
    for (const Result& r : row.rounds) v.push_back(r.*field);
    return median(v);
  };
  // Per load, the median over rounds of (all threads / 1 thread), p50 and p99.
  struct Ratio {
    int64_t load;
    double p50, p99;
  };
  std::vector<Ratio> ratios;
  for (std::size_t i = 0; i + 1 < rows.size(); ++i) {
    const Row &one = rows[i], &many = rows[i + 1];
    if (one.load != many.load || one.threads != 1) continue;
    std::vector<double> p50, p99;
    for (std::size_t r = 0; r < one.rounds.size(); ++r) {
      p50.push_back(many.rounds[r].p50 / one.rounds[r].p50);
      p99.push_back(many.rounds[r].p99 / one.rounds[r].p99);
    }
    ratios.push_back({one.load, median(p50), median(p99)});
  }
  if (json) {
    std::printf("{\"load_average_before\": \"%s\", \"rounds\": %lld, \"rows\": [", before.c_str(),
                static_cast<long long>(rounds));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double p50 = of_rounds(rows[i], &Result::p50), p99 = of_rounds(rows[i], &Result::p99);
      std::printf("%s{\"busy\": %lld, \"threads\": %d, \"ms_p50\": %.4f, \"ms_p99\": %.4f, "
                  "\"fps\": %.3f}",
                  i ? ", " : "", static_cast<long long>(rows[i].load), rows[i].threads, p50, p99,
                  1000.0 / p50);
    }
    std::printf("], \"ratios\": [");
    for (std::size_t i = 0; i < ratios.size(); ++i)
      std::printf("%s{\"busy\": %lld, \"p50\": %.4f, \"p99\": %.4f}", i ? ", " : "",
                  static_cast<long long>(ratios[i].load), ratios[i].p50, ratios[i].p99);
    std::printf("]}\n");
    return 0;
  }
  std::printf("%s %s, %lld steps, %lld timed frames per row and round, %lld rounds (thread "
              "counts in alternating order); load average before: %s\n\n",
              o.preset.c_str(), o.precision.c_str(), static_cast<long long>(o.steps),
              static_cast<long long>(o.frames), static_cast<long long>(rounds), before.c_str());
  std::printf("| busy processes | threads | ms/frame p50 | p99 | p99/p50 | FPS | p50 of each round |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    const double p50 = of_rounds(row, &Result::p50), p99 = of_rounds(row, &Result::p99);
    std::string each;
    for (const Result& r : row.rounds) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.2f", each.empty() ? "" : " ", r.p50);
      each += buf;
    }
    std::printf("| %lld | %d | %.2f | %.2f | %.2f | %.1f | %s |\n", static_cast<long long>(row.load),
                row.threads, p50, p99, p99 / p50, 1000.0 / p50, each.c_str());
  }
  if (!ratios.empty()) std::printf("\n");
  for (const Ratio& r : ratios)
    std::printf("%lld busy: %d threads / 1 thread, median of the rounds' ratios: p50 %.3f, p99 %.3f "
                "(<= 1: as fast as one thread or faster)\n",
                static_cast<long long>(r.load), all, r.p50, r.p99);
  return 0;
}

}  // namespace

int run_bench_video(Args args) {
  constexpr const char* kMatrixPrecisions = "fp32,fp16,bf16,autocast-bf16,auto";
  std::string presets = "lightweight", precisions = kMatrixPrecisions;
  std::string steps_list = "1,4", checkpoint = default_video_model_path(), save, compare;
  std::string report = "bench_video.md", chart = "bench_video.svg";
  int64_t frames = 0, warmup = 3, quality_frame = 20, seed = 0, load = -1, rounds = 3;
  bool json = false, quick = false, graph_compare = false;
  std::string graph_dump;
  bool run_one_mode = false;
  ArgParser p("bench video",
              "Video generation benchmark matrix: precisions x presets x DDIM steps; ms/frame,\n"
              "FPS, peak memory, speedup and memory reduction vs fp32, PSNR vs fp32, % of peak.");
  p.option("--presets", &presets, "comma-separated: lightweight,medium,heavy,xl");
  p.option("--precisions", &precisions, "comma-separated: fp32,fp16,bf16,autocast-bf16,auto");
  p.option("--steps", &steps_list, "comma-separated DDIM steps per frame");
  p.option("--frames", &frames, "timed frames per configuration (0: 20, or 200 with --load)",
           {.min = 0});
  p.option("--warmup", &warmup, "untimed frames first", {.min = 0});
  p.option("--quality-frame", &quality_frame, "frame index for the long-stream PSNR vs fp32",
           {.min = 1});
  p.option("--checkpoint", &checkpoint, "trained model used where its preset matches");
  p.option("--seed", &seed, "noise seed (the same for every configuration)");
  p.option("--save", &save, "write the results as a baseline JSON file");
  p.option("--compare", &compare, "flag regressions against a baseline JSON file");
  p.option("--report", &report, "Markdown report to write ('' for none)");
  p.option("--chart", &chart, "SVG chart to write ('' for none)");
  p.flag("--json", &json, "print the results as JSON on stdout");
  p.option("--load", &load,
           "latency mode: one stream (first preset, precision [auto], steps) at 1 and all threads, quiet and beside this many busy processes it\n"
           "starts (0: quiet only)");
  p.option("--rounds", &rounds,
           "with --load: rounds per load, the thread counts in alternating order", {.min = 1});
  p.flag("--quick", &quick, "lightweight only, fp32 and bf16, 4 steps, 8 frames");
  p.flag("--graph", &graph_compare,
         "eager vs graph replay: one stream (first preset, precision [auto], steps) each, frames "
         "alternating, ms/frame, memory and whether the frames agree bit for bit");
  p.option("--graph-dump", &graph_dump,
           "with --graph: write the replayed graph to PREFIX.txt (one line per kernel) and "
           "PREFIX.dot (Graphviz)");
  p.flag("--run-one", &run_one_mode, "(internal) run one configuration and print JSON");
  if (!p.parse(args)) return 0;
  if (frames == 0) frames = load >= 0 ? 200 : 20;
  if (frames < 3) throw UsageError{"bench video: --frames must be >= 3 (0: the default)"};
  if (run_one_mode) {
    return run_one({.preset = split_list(presets).at(0),
                    .precision = split_list(precisions).at(0),
                    .checkpoint = checkpoint,
                    .frames_out = save,
                    .steps = integer_option("bench video", "--steps", steps_list),
                    .frames = frames,
                    .warmup = warmup,
                    .quality_frame = quality_frame,
                    .seed = seed});
  }
  if (graph_compare || load >= 0) {
    // One stream, in the stream's own precision (video generate's default) unless asked
    // otherwise.
    const std::string precision =
        precisions == kMatrixPrecisions ? "auto" : split_list(precisions).at(0);
    parse_inference_precision(precision);
    const std::string preset = split_list(presets).at(0);
    parse_usage("bench video", [&] { return models::UNetVideoConfig::preset(preset); });
    const RunOne one{.preset = preset,
                     .precision = precision,
                     .checkpoint = checkpoint,
                     .frames_out = "",
                     .steps = integer_option("bench video", "--steps", split_list(steps_list).at(0)),
                     .frames = frames,
                     .warmup = warmup,
                     .seed = seed};
    return graph_compare ? run_graph_compare(one, json, graph_dump) : run_latency(one, load, rounds, json);
  }
  if (quick) {
    presets = "lightweight";
    precisions = "fp32,bf16";
    steps_list = "4";
    frames = 8;
    warmup = 2;
    quality_frame = std::min<int64_t>(quality_frame, 10);
  }
  std::vector<std::string> precision_names = split_list(precisions);
  for (const std::string& name : precision_names) parse_inference_precision(name);  // validate
  if (std::find(precision_names.begin(), precision_names.end(), "fp32") == precision_names.end())
    precision_names.insert(precision_names.begin(), "fp32");  // the reference of every ratio

  for (const std::string& steps : split_list(steps_list))
    integer_option("bench video", "--steps", steps);  // validate before the long run
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  const ScratchFolder scratch("mixprec_bench_video_");  // removed on any error too
  const std::string& tmp = scratch.path();
  for (const std::string& preset : split_list(presets))
    parse_usage("bench video", [&] { return models::UNetVideoConfig::preset(preset); });
  const Peak peak = bf16_peak();
  std::vector<Result> results;
  for (const std::string& preset : split_list(presets)) {
    const bool direct = direct_checkpoint(preset, checkpoint);
    if (direct)
      std::fprintf(stderr,
                   "bench video: %s is a direct model: one forward per frame, one row "
                   "per precision (steps 1)\n",
                   checkpoint.c_str());
    for (const std::string& steps : direct ? std::vector<std::string>{"1"} : split_list(steps_list))
      for (const std::string& precision : precision_names) {
        const std::string frames_file =
            tmp + "/" + preset + "_" + precision + "_" + steps + ".safetensors";
        std::ostringstream cmd;
        cmd << "'" << self << "' bench video --run-one --presets " << preset << " --precisions "
            << precision << " --steps " << steps << " --frames " << frames << " --warmup " << warmup
            << " --quality-frame " << quality_frame << " --seed " << seed << " --checkpoint '"
            << checkpoint << "' --save '" << frames_file << "'";
        std::fprintf(stderr, "bench video: %s %s, %s steps ...\n", preset.c_str(),
                     precision.c_str(), steps.c_str());
        Result r = parse_result(run_and_capture(cmd.str(), "bench video"));
        r.frames_file = frames_file;
        results.push_back(r);
      }
  }
  // Ratios against fp32 of the same preset and steps.
  for (Result& r : results) {
    const auto ref = std::find_if(results.begin(), results.end(), [&](const Result& x) {
      return x.preset == r.preset && x.steps == r.steps && x.precision == "fp32";
    });
    r.pct_peak = 100.0 * r.gflop_per_frame / (r.p50 / 1000.0) / peak.gflops;
    if (ref == results.end()) continue;
    r.speedup = ref->p50 / r.p50;
    r.memory_reduction = 100.0 * (1.0 - r.peak_alloc_mib / ref->peak_alloc_mib);
    const io::SafetensorsFile mine = io::SafetensorsFile::open(r.frames_file);
    const io::SafetensorsFile base = io::SafetensorsFile::open(ref->frames_file);
    r.psnr_first = models::psnr(mine.tensor("frame_first"), base.tensor("frame_first"));
    r.psnr_last = models::psnr(mine.tensor("frame_last"), base.tensor("frame_last"));
    r.ssim_last = ssim(mine.tensor("frame_last"), base.tensor("frame_last"));
  }

  const std::string md = markdown_of(results, peak, quality_frame);
  if (json)
    std::printf("%s\n", json_of(results, peak.gflops).c_str());
  else
    std::printf("%s", md.c_str());
  if (!report.empty()) write_file(report, "# mixprec bench video\n\n" + md);
  if (!chart.empty()) write_file(chart, svg_of(results));
  if (!save.empty()) write_file(save, json_of(results, peak.gflops) + "\n");
  int regressions = 0;
  if (!compare.empty()) {
    std::ifstream f(compare);
    std::stringstream contents;
    contents << f.rdbuf();
    if (!f) throw Error("[bench video] could not read baseline " + compare);
    const io::JsonValue base = io::parse_json(contents.str());
    for (const io::JsonValue& item : json_member(base, "results", "bench video").items()) {
      const ChildResult b{item, "bench video"};
      const std::string key = b.text("preset") + "/" + b.text("precision") + "/" +
                              std::to_string(static_cast<int64_t>(b.number("steps")));
      for (const Result& r : results) {
        if (r.key() != key) continue;
        const double old_ms = b.number("ms_p50");
        // Noise: the larger interquartile range of the two runs, and never less than 5%.
        const double noise = std::max({0.05 * old_ms, b.number("ms_spread"), r.spread});
        const bool slower = r.p50 > old_ms + 2 * noise;
        regressions += slower ? 1 : 0;
        std::printf("%-40s %8.2f -> %8.2f ms  %+6.1f%%  %s\n", key.c_str(), old_ms, r.p50,
                    100.0 * (r.p50 / old_ms - 1.0), slower ? "REGRESSION" : "ok");
      }
    }
  }
  return regressions > 0 ? 1 : 0;
}

}  // namespace mixprec::app
