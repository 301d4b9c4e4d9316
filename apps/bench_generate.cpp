// `mixprec bench generate`: GPT text generation (models::generate, greedy) per precision and
// decoding, side by side in one process: the whole window every step, the KV cache through the
// op front-ends, and the KV cache with each one-token step replayed from a captured graph. The
// configurations alternate round by round, so a machine whose load drifts affects them alike;
// each figure is the median over the rounds. Every decoding must pick the window's tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "mixprec/core/parallel.h"
#include "mixprec/io/json.h"
#include "mixprec/models/gpt_generate.h"

namespace mixprec::app {
namespace {

constexpr std::pair<std::string_view, models::Decoding> kDecodings[] = {
    {"replayed", models::Decoding::Replayed},
    {"cached", models::Decoding::Cached},
    {"window", models::Decoding::Window}};

models::Decoding decoding_named(const std::string& name) {
  for (const auto& [n, d] : kDecodings)
    if (n == name) return d;
  throw UsageError{"bench generate: --decodings takes replayed, cached and window, got '" + name +
                   "'"};
}

struct Row {
  std::string precision, decoding;
  std::vector<double> ms_per_token;  // one per round
  std::vector<int64_t> tokens;       // of the last round
  double median() const {
    std::vector<double> v = ms_per_token;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace

int run_bench_generate(Args args) {
  std::string precisions = "fp32,bf16", decodings = "replayed,cached,window";
  int64_t prompt_tokens = 16, new_tokens = 200, rounds = 3, batch = 1;
  bool json = false;
  ArgParser p("bench generate",
              "GPT text generation (GPTConfig::small(), greedy): ms per new token for each "
              "precision and decoding, alternating round by round, and whether every decoding "
              "picked the same tokens.");
  p.option("--precisions", &precisions,
           "comma-separated: fp32 (the model in f32), bf16 (true bf16: the model converted, "
           "LayerNorms f32)");
  p.option("--decodings", &decodings,
           "comma-separated: replayed (KV cache, each step replayed from a graph), cached (KV "
           "cache, op front-ends), window (the whole window every step)");
  p.option("--prompt", &prompt_tokens, "prompt tokens", {.min = 1, .max = 255});
  p.option("--tokens", &new_tokens, "new tokens per generation", {.min = 1, .max = 4096});
  p.option("--rounds", &rounds, "rounds (every configuration once per round)", {.min = 1});
  p.option("--batch", &batch, "sequences generated together", {.min = 1, .max = 64});
  p.flag("--json", &json, "print the results as JSON on stdout");
  p.epilog(
      "ms per new token: a whole generate() call (prompt, graph capture included) over the "
      "new tokens. The weights are GPT-2's initialisation (seed 1337): the speed does not "
      "depend on them.");
  if (!p.parse(args)) return 0;

  std::vector<Row> rows;
  for (const std::string& precision : split_list(precisions)) {
    if (precision != "fp32" && precision != "bf16")
      throw UsageError{"bench generate: --precisions takes fp32 and bf16, got '" + precision + "'"};
    for (const std::string& decoding : split_list(decodings)) {
      decoding_named(decoding);
      rows.push_back({precision, decoding, {}, {}});
    }
  }
  if (rows.empty()) throw UsageError{"bench generate: nothing to run"};

  Generator f32_init(1337), bf16_init(1337);  // the same weights
  models::GPT f32_model(models::GPTConfig::small(), f32_init);
  models::GPT bf16_model(models::GPTConfig::small(), bf16_init);
  bf16_model.to(DType::BF16);
  std::vector<int64_t> prompt_values(static_cast<std::size_t>(batch * prompt_tokens));
  Generator prompt_gen(7);
  for (int64_t& t : prompt_values) t = static_cast<int64_t>(prompt_gen.next_u64() % 256);
  const Tensor prompt = Tensor::from_vector(prompt_values, Shape{batch, prompt_tokens});

  for (int64_t round = 0; round < rounds; ++round)
    for (Row& r : rows) {
      std::fprintf(stderr, "\rbench generate: round %lld of %lld, %s %s ...          ",
                   static_cast<long long>(round + 1), static_cast<long long>(rounds),
                   r.precision.c_str(), r.decoding.c_str());
      models::GPT& model = r.precision == "bf16" ? bf16_model : f32_model;
      Generator gen(1);
      const auto start = std::chrono::steady_clock::now();
      const Tensor out =
          models::generate(model, prompt, new_tokens, 0.0, 0, gen, decoding_named(r.decoding));
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      r.ms_per_token.push_back(ms / static_cast<double>(new_tokens));
      r.tokens.assign(out.data<int64_t>(), out.data<int64_t>() + out.numel());
    }
  std::fprintf(stderr, "\n");

  // Each decoding against its precision's cached row (speed) and window row (tokens).
  auto find = [&](const Row& r, std::string_view decoding) -> const Row* {
    for (const Row& o : rows)
      if (o.precision == r.precision && o.decoding == decoding) return &o;
    return nullptr;
  };
  if (json) {
    std::printf(
        "{\"threads\": %d, \"batch\": %lld, \"prompt\": %lld, \"tokens\": %lld, "
        "\"rows\": [",
        num_threads(), static_cast<long long>(batch), static_cast<long long>(prompt_tokens),
        static_cast<long long>(new_tokens));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const Row* window = find(r, "window");
      std::printf(
          "%s{\"precision\": %s, \"decoding\": %s, \"ms_per_token\": %.4f, "
          "\"same_tokens_as_window\": %s}",
          i ? ", " : "", io::json_quote(r.precision).c_str(), io::json_quote(r.decoding).c_str(),
          r.median(),
          window == nullptr            ? "null"
          : r.tokens == window->tokens ? "true"
                                       : "false");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "GPT small() generation, batch %lld, prompt %lld + %lld new tokens (greedy), %d "
      "thread(s), median of %lld rounds\n\n",
      static_cast<long long>(batch), static_cast<long long>(prompt_tokens),
      static_cast<long long>(new_tokens), num_threads(), static_cast<long long>(rounds));
  std::printf(
      "| precision | decoding | ms/token | tokens/s | vs cached | same tokens as window |\n"
      "|---|---|---|---|---|---|\n");
  bool all_same = true;
  for (const Row& r : rows) {
    const Row* cached = find(r, "cached");
    const Row* window = find(r, "window");
    const bool same = window == nullptr || r.tokens == window->tokens;
    all_same = all_same && same;
    char speedup[32] = "-";
    if (cached != nullptr)
      std::snprintf(speedup, sizeof speedup, "%.2fx", cached->median() / r.median());
    std::printf("| %s | %s | %.3f | %.0f | %s | %s |\n", r.precision.c_str(), r.decoding.c_str(),
                r.median(), 1000.0 * static_cast<double>(batch) / r.median(), speedup,
                window == nullptr ? "-"
                : same            ? "yes"
                                  : "NO");
  }
  return all_same ? 0 : 1;
}

}  // namespace mixprec::app
