// `mixprec bench train`: the GPT training step (GPTConfig::small(): 6 layers, d_model 384,
// 6 heads, context 256; batch 8; AdamW) in fp32, bf16 autocast, bf16 parameters with f32
// master weights, and f16 autocast with loss scaling, side by side with PyTorch's f32 and bf16
// autocast step on the identical model (bench/peers/gpt_train.py) in the same run. Every
// configuration runs in its own process, so peak RSS is its own.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/allocator.h"
#include "mixprec/core/parallel.h"
#include "mixprec/core/profiler.h"
#include "mixprec/io/json.h"
#include "mixprec/models/gpt_train.h"
#include "video_common.h"

namespace mixprec::app {
namespace {

struct OpTime {
  std::string name;
  double ms = 0, backward_ms = 0;  // per step
  int64_t calls = 0;
  double total() const { return ms + backward_ms; }
};

struct Row {
  std::string name;
  double ms = 0, min_ms = 0, tokens_per_s = 0, peak_alloc_mib = NAN, rss_mib = 0, loss = 0;
  double mean_ms = 0;        // with --profile: the mean step the ops are a share of
  std::vector<OpTime> ops;  // with --profile
  // With --graph, the replayed graph's kernels and memory plan (MiB); kernels 0 otherwise.
  double graph_kernels = 0, arena_mib = 0, live_peak_mib = 0, eager_peak_mib = 0;
  double side_replay_ms = 0, side_eager_ms = 0;  // p50s with steps alternating in one process
};

// The categories of a profile: the first row whose key the op's or backward node's name
// contains (case-insensitive) gives it; any other op is elementwise.
constexpr std::pair<std::string_view, std::string_view> kCategories[] = {
    {"adam", "optimizer"},       {"sgd", "optimizer"},       {"clip_grad", "optimizer"},
    {"unscale", "optimizer"},    {"attention", "attention"}, {"sdpa", "attention"},
    {"conv", "convolution"},     {"linear", "GEMM"},         {"gemm", "GEMM"},
    {"matmul", "GEMM"},          {"norm", "norms"},          {"embedding", "embedding"},
    {"cross_entropy", "loss"},   {"crossentropy", "loss"},   {"copy", "copies, casts"},  {"view", "copies, casts"},
    {"transpose", "copies, casts"}, {"permute", "copies, casts"}, {"cat", "copies, casts"}};

std::string_view category_of(const std::string& op) {
  std::string lower = op;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [key, category] : kCategories)
    if (lower.find(key) != std::string::npos) return category;
  return "elementwise";
}

// A profiled step's time per category, forward and backward, slowest first; `timed` receives
// the sum over every timed op (the rest of the step is the framework's own time).
struct Split {
  double forward = 0, backward = 0;
};
std::vector<std::pair<std::string, Split>> category_times(const Row& r, double& timed) {
  std::vector<std::pair<std::string, Split>> categories;
  timed = 0;
  for (const OpTime& op : r.ops) {
    const std::string_view c = category_of(op.name);
    auto it = std::find_if(categories.begin(), categories.end(),
                           [&](const auto& e) { return e.first == c; });
    if (it == categories.end()) it = categories.insert(categories.end(), {std::string(c), {}});
    it->second.forward += op.ms;
    it->second.backward += op.backward_ms;
    timed += op.total();
  }
  std::sort(categories.begin(), categories.end(), [](const auto& a, const auto& b) {
    return a.second.forward + a.second.backward > b.second.forward + b.second.backward;
  });
  return categories;
}

// Where a profiled step's time goes: per category, forward and backward, then the slowest ops.
void print_profile(const Row& r) {
  double timed = 0;
  const std::vector<std::pair<std::string, Split>> categories = category_times(r, timed);
  std::printf("\nwhere a %s step goes (ms per step, mean of the timed steps; forward: outside "
              "backward, the optimizer's update included):\n",
              r.name.c_str());
  std::printf("  %-22s %9s %9s %9s %7s\n", "category", "forward", "backward", "total", "share");
  for (const auto& [name, t] : categories)
    std::printf("  %-22s %9.2f %9.2f %9.2f %6.1f%%\n", name.c_str(), t.forward, t.backward,
                t.forward + t.backward, 100 * (t.forward + t.backward) / r.mean_ms);
  std::printf("  %-22s %9s %9s %9.2f %6.1f%%\n", "framework (untimed)", "", "",
              r.mean_ms - timed, 100 * (r.mean_ms - timed) / r.mean_ms);
  std::printf("  %-22s %9s %9s %9.2f\n", "step", "", "", r.mean_ms);
  std::vector<OpTime> slowest = r.ops;
  std::sort(slowest.begin(), slowest.end(),
            [](const OpTime& a, const OpTime& b) { return a.total() > b.total(); });
  std::printf("  slowest:");
  for (std::size_t i = 0; i < std::min<std::size_t>(8, slowest.size()); ++i)
    std::printf("%s %s %.2f ms (%lld calls)", i ? "," : "", slowest[i].name.c_str(),
                slowest[i].total(), static_cast<long long>(slowest[i].calls));
  std::printf("\n");
}

int run_one(const std::string& precision, int64_t warmup, int64_t steps, int64_t batch,
            bool checkpoint_activations, bool graph, bool profile_ops) {
  const models::TextDataset data =
      models::TextDataset::from_file(source_path("data/shakespeare.txt"));
  Generator gen(1337);
  models::GPT model(models::GPTConfig::small(), gen);
  models::GPTTrainer trainer(model, data,
                             {.precision = amp::PrecisionConfig::parse(precision),
                              .batch = batch,
                              .lr = 3e-4,
                              .warmup = 1,
                              .total_steps = warmup + steps,
                              .checkpoint_activations = checkpoint_activations,
                              .graph = graph});
  CachingAllocator::global().reset_peak();
  std::vector<double> ms;
  double loss = 0;
  profiler::Profile profile;  // the timed steps' ops, with --profile
  for (int64_t i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::optional<profiler::ScopedProfile> on;
      if (profile_ops && i >= warmup) on.emplace(profile);
      loss = trainer.step(i);
    }
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) ms.push_back(t);
    // A graph's capture (the first step) holds every intermediate of its recorded run at once:
    // the peak counts the steps that follow, as a deployment runs them.
    if (graph && i + 1 == warmup) CachingAllocator::global().reset_peak();
  }
  const double p50 = median(ms);
  std::string ops;  // per step: "name": [ms, backward ms, calls in all]
  const double per_step = 1e3 / static_cast<double>(steps);
  for (const auto& [name, e] : profile.entries())
    ops += (ops.empty() ? "" : ", ") + io::json_quote(name) + ": [" +
           std::to_string(e.seconds * per_step) + ", " +
           std::to_string(e.backward_seconds * per_step) + ", " +
           std::to_string((e.calls + e.backward_calls) / steps) + "]";
  const double mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(steps);
  // The replayed graph's memory plan: its arena against the eager peak of the same function.
  // Then the speed side by side: the same trainer runs its next steps eagerly and replayed in
  // turn (which goes first alternating too), so the machine's noise falls on both.
  std::string plan;
  const double peak_alloc_mib =
      static_cast<double>(CachingAllocator::global().stats().peak_allocated_bytes) / (1 << 20);
  const double peak_rss_mib = static_cast<double>(peak_rss_bytes()) / (1 << 20);
  if (const graph::Graph* g = trainer.step_graph()) {
    std::vector<double> replay_ms, eager_ms;
    auto timed = [&](bool replay, int64_t i) {
      trainer.set_graph_replay(replay);
      const auto t0 = std::chrono::steady_clock::now();
      trainer.step(i);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
          .count();
    };
    for (int64_t i = 0; i < steps; ++i) {
      const bool replay_first = i % 2 == 0;
      (replay_first ? replay_ms : eager_ms).push_back(timed(replay_first, 2 * i));
      (replay_first ? eager_ms : replay_ms).push_back(timed(!replay_first, 2 * i + 1));
    }
    const graph::MemoryPlan& m = g->memory();
    const double mib = 1.0 / (1 << 20);
    char text[256];
    std::snprintf(text, sizeof text,
                  ", \"graph\": {\"kernels\": %zu, \"arena_mib\": %.2f, \"inputs_mib\": %.3f, "
                  "\"live_peak_mib\": %.2f, \"eager_peak_mib\": %.2f, \"replay_ms\": %.2f, "
                  "\"eager_ms\": %.2f}",
                  g->size(), static_cast<double>(m.arena_bytes) * mib,
                  static_cast<double>(m.input_bytes) * mib,
                  static_cast<double>(m.live_peak_bytes) * mib,
                  static_cast<double>(m.eager_peak_bytes) * mib, median(replay_ms),
                  median(eager_ms));
    plan = text;
  }
  std::printf(
      "{\"mode\": \"%s\", \"ms_per_step\": %.2f, \"min_ms\": %.2f, \"tokens_per_s\": %.1f, "
      "\"peak_alloc_mib\": %.2f, \"peak_rss_mib\": %.2f, \"last_loss\": %.4f, "
      "\"mean_ms\": %.3f, \"ops\": {%s}%s}\n",
      (precision + (checkpoint_activations ? " +ckpt" : "") + (graph ? " +graph" : "")).c_str(),
      p50,
      *std::min_element(ms.begin(), ms.end()),
      static_cast<double>(batch * model.config().context) / (p50 / 1000.0),
      peak_alloc_mib, peak_rss_mib, loss, mean_ms, ops.c_str(), plan.c_str());
  return 0;
}

// With --profile: `, "profile_ms": {category: ms per step, ..., "framework (untimed)": ms}`.
std::string profile_json(const Row& r) {
  if (r.ops.empty()) return "";
  double timed = 0;
  std::string out = ", \"profile_ms\": {";
  for (const auto& [name, t] : category_times(r, timed))
    out += io::json_quote(name) + ": " + std::to_string(t.forward + t.backward) + ", ";
  return out + "\"framework (untimed)\": " + std::to_string(r.mean_ms - timed) + "}";
}

Row parse_row(const io::JsonValue& v, const std::string& prefix) {
  const ChildResult result{v, "bench train"};
  Row r;
  r.name = prefix + result.text("mode");
  r.ms = result.number("ms_per_step");
  r.min_ms = result.number("min_ms");
  r.tokens_per_s = result.number("tokens_per_s");
  if (const io::JsonValue* a = v.find("peak_alloc_mib")) r.peak_alloc_mib = a->as_double();
  r.rss_mib = result.number("peak_rss_mib");
  r.loss = result.number("last_loss");
  if (const io::JsonValue* mean = v.find("mean_ms")) r.mean_ms = mean->as_double();
  if (const io::JsonValue* g = v.find("graph")) {
    r.graph_kernels = json_member(*g, "kernels", "bench train").as_double();
    r.arena_mib = json_member(*g, "arena_mib", "bench train").as_double();
    r.live_peak_mib = json_member(*g, "live_peak_mib", "bench train").as_double();
    r.eager_peak_mib = json_member(*g, "eager_peak_mib", "bench train").as_double();
    r.side_replay_ms = json_member(*g, "replay_ms", "bench train").as_double();
    r.side_eager_ms = json_member(*g, "eager_ms", "bench train").as_double();
  }
  if (const io::JsonValue* ops = v.find("ops"))
    for (const io::JsonMember& m : ops->members())
      r.ops.push_back({m.key, m.value.items().at(0).as_double(),
                       m.value.items().at(1).as_double(),
                       static_cast<int64_t>(m.value.items().at(2).as_double())});
  return r;
}

}  // namespace

int run_bench_train(Args args) {
  std::string modes = "fp32,bf16,bf16-params,fp16", one, python = "/usr/bin/python3";
  int64_t warmup = 2, steps = 8, batch = 8;
  bool json = false, no_peer = false, quick = false, checkpoint_activations = false,
       graph = false, profile_ops = false;
  ArgParser p("bench train",
              "GPT small() training step (6 layers, d_model 384, 6 heads, context 256, AdamW):\n"
              "ms/step, tokens/s and peak memory per precision, with PyTorch in the same run.");
  p.option("--modes", &modes, "comma-separated: fp32,bf16,bf16-params,fp16,fp16-params");
  p.option("--warmup", &warmup, "untimed steps first", {.min = 0});
  p.option("--steps", &steps, "timed steps", {.min = 1});
  p.option("--batch", &batch, "sequences per step", {.min = 1});
  p.option("--python", &python, "interpreter for the PyTorch peer (Debian's python3-torch)");
  p.flag("--no-peer", &no_peer, "skip PyTorch");
  p.flag("--checkpoint-activations", &checkpoint_activations,
         "mixprec with activation checkpointing per block (train gpt's flag)");
  p.flag("--graph", &graph,
         "also time each mode with its forward and backward replayed from a captured graph "
         "(train gpt's flag), in the same run");
  p.flag("--profile", &profile_ops,
         "also print where each mixprec step's time goes: per category (GEMM, attention, norms, "
         "elementwise, copies, optimizer, ...) and forward / backward, the slowest ops, and the "
         "framework's own time (the step less every timed op)");
  p.flag("--quick", &quick, "fp32 and bf16, 1 + 3 steps, no peer");
  p.flag("--json", &json, "print the results as JSON on stdout");
  p.option("--run-one", &one, "(internal) time one mode and print JSON");
  if (!p.parse(args)) return 0;
  if (!one.empty())
    return run_one(one, warmup, steps, batch, checkpoint_activations, graph, profile_ops);
  if (quick) {
    modes = "fp32,bf16";
    warmup = 1;
    steps = 3;
    no_peer = true;
  }
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  std::vector<Row> rows;
  for (const std::string& mode : split_list(modes)) {
    parse_usage("bench train", [&] { return amp::PrecisionConfig::parse(mode); });  // validate
    for (const bool replay : {false, true}) {
      if (replay && !graph) continue;
      std::fprintf(stderr, "bench train: mixprec %s%s ...\n", mode.c_str(),
                   replay ? " (graph replay)" : "");
      const std::string out = run_and_capture(
          "'" + self + "' bench train --run-one " + mode + " --warmup " +
              std::to_string(std::max<int64_t>(warmup, replay ? 1 : 0)) + " --steps " +
              std::to_string(steps) + " --batch " + std::to_string(batch) +
              (checkpoint_activations ? " --checkpoint-activations" : "") +
              (replay ? " --graph" : "") + (profile_ops ? " --profile" : ""),
          "bench train");
      rows.push_back(parse_row(io::parse_json(out), "mixprec "));
    }
  }
  std::string peer_note;
  if (!no_peer) {
    const std::string script = source_path("bench/peers/gpt_train.py");
    std::fprintf(stderr, "bench train: PyTorch f32 and bf16 autocast (%s) ...\n", python.c_str());
    try {
      const std::string out = run_and_capture(
          "'" + python + "' '" + script + "' --json --threads " + std::to_string(num_threads()) +
              " --warmup " + std::to_string(warmup) + " --steps " + std::to_string(steps) +
              " --batch " + std::to_string(batch) + " 2>/dev/null",
          "bench train");
      const std::size_t end = out.find_last_not_of('\n');
      const std::size_t begin = out.rfind('\n', end);  // the JSON is the last line
      const io::JsonValue v =
          io::parse_json(out.substr(begin == std::string::npos ? 0 : begin + 1, end - begin));
      for (const io::JsonValue& r : json_member(v, "results", "bench train").items())
        rows.push_back(parse_row(r, "pytorch "));
    } catch (const std::exception& e) {
      peer_note =
          std::string("PyTorch peer not run: ") + e.what() + " (apt-get install python3-torch)";
    }
  }
  auto find = [&](const std::string& name) -> const Row* {
    for (const Row& r : rows)
      if (r.name == name) return &r;
    return nullptr;
  };
  const Row* f32 = find("mixprec fp32");
  const Row* torch_bf16 = find("pytorch bf16 autocast");
  if (json) {
    std::printf("{\"threads\": %d, \"batch\": %lld, \"rows\": [", num_threads(),
                static_cast<long long>(batch));
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::printf(
          "%s{\"name\": \"%s\", \"ms_per_step\": %.2f, \"min_ms\": %.2f, \"tokens_per_s\": "
          "%.1f, \"peak_alloc_mib\": %s, \"peak_rss_mib\": %.1f, \"last_loss\": %.4f%s}",
          i ? ", " : "", rows[i].name.c_str(), rows[i].ms, rows[i].min_ms, rows[i].tokens_per_s,
          std::isfinite(rows[i].peak_alloc_mib) ? std::to_string(rows[i].peak_alloc_mib).c_str()
                                                : "null",
          rows[i].rss_mib, rows[i].loss, profile_json(rows[i]).c_str());
    std::printf("]}\n");
  } else {
    std::printf(
        "GPT small() training step, batch %lld x 256 tokens, %d threads, %lld timed steps\n",
        static_cast<long long>(batch), num_threads(), static_cast<long long>(steps));
    std::printf("%-24s %10s %9s %10s %11s %9s %12s %14s\n", "configuration", "ms/step", "min ms",
                "tokens/s", "alloc MiB", "RSS MiB", "vs own f32", "vs torch bf16");
    for (const Row& r : rows)
      std::printf("%-24s %10.1f %9.1f %10.0f %11.1f %9.1f %11.2fx %13.2fx\n", r.name.c_str(), r.ms,
                  r.min_ms, r.tokens_per_s, r.peak_alloc_mib, r.rss_mib,
                  f32 != nullptr ? f32->ms / r.ms : NAN,
                  torch_bf16 != nullptr ? torch_bf16->ms / r.ms : NAN);
    if (!peer_note.empty()) std::printf("%s\n", peer_note.c_str());
    for (const Row& r : rows)
      if (r.graph_kernels > 0)
        std::printf("%s: %.0f kernels per micro-batch; arena %.1f MiB (most alive at once %.1f) "
                    "vs the eager forward and backward's peak %.1f MiB = %.1f%%; side by side "
                    "with an eager trainer, steps alternating: %.1f vs %.1f ms = %.3fx\n",
                    r.name.c_str(), r.graph_kernels, r.arena_mib, r.live_peak_mib,
                    r.eager_peak_mib, 100.0 * r.arena_mib / r.eager_peak_mib, r.side_replay_ms,
                    r.side_eager_ms, r.side_eager_ms / r.side_replay_ms);
    for (const Row& r : rows)
      if (!r.ops.empty()) print_profile(r);
  }
  return 0;
}

}  // namespace mixprec::app
