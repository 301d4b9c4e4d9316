#include "mixprec/core/dispatch.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "mixprec/core/error.h"

namespace mixprec {
namespace {

constexpr std::array<std::string_view, 3> kBf16ConvNames{"auto", "dot", "widen"};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

DispatchConfig from_environment() {
  DispatchConfig c;
  c.level = best_isa();
  if (const char* forced = env("MIXPREC_ISA")) {
    c.level = parse_isa(forced);
    MIXPREC_CHECK(isa_supported(c.level), "MIXPREC_ISA=", forced,
                  " asks for a kernel level this CPU lacks; it supports up to ",
                  isa_name(best_isa()));
  }
  if (const char* mode = env("MIXPREC_BF16_CONV")) {
    bool known = false;
    for (std::size_t i = 0; i < kBf16ConvNames.size(); ++i)
      if (kBf16ConvNames[i] == mode) {
        c.bf16_conv = static_cast<Bf16ConvCompute>(i);
        known = true;
      }
    MIXPREC_CHECK(known, "MIXPREC_BF16_CONV=", mode, " is not one of auto, dot, widen");
  }
  if (const char* pack = env("MIXPREC_PACK_WEIGHTS")) {
    const std::string_view v = pack;
    MIXPREC_CHECK(v == "0" || v == "1", "MIXPREC_PACK_WEIGHTS=", v, " is not 0 or 1");
    c.pack_inference_weights = v == "1";
  }
  return c;
}

// The config as one word, so that every kernel on every thread reads it with one relaxed load
// and a scope swaps it whole: byte 0 the level, byte 1 the bf16 mode, byte 2 the packing flag.
uint32_t encode(const DispatchConfig& c) {
  return uint32_t{static_cast<uint8_t>(c.level)} |
         uint32_t{static_cast<uint8_t>(c.bf16_conv)} << 8 |
         uint32_t{c.pack_inference_weights} << 16;
}
DispatchConfig decode(uint32_t w) {
  return {static_cast<IsaLevel>(w & 0xff), static_cast<Bf16ConvCompute>((w >> 8) & 0xff),
          ((w >> 16) & 1) != 0};
}

std::atomic<uint32_t> g_config{0};
std::once_flag g_read_environment;

std::atomic<uint32_t>& slot() {
  // call_once retries after a throw, so a bad variable is reported on every use.
  std::call_once(g_read_environment, [] { g_config.store(encode(from_environment())); });
  return g_config;
}

}  // namespace

DispatchConfig dispatch_config() { return decode(slot().load(std::memory_order_relaxed)); }

IsaLevel active_isa() {
  return static_cast<IsaLevel>(slot().load(std::memory_order_relaxed) & 0xff);
}

void set_dispatch_config(const DispatchConfig& config) {
  MIXPREC_CHECK(isa_supported(config.level), "[set_dispatch_config] kernel level ",
                isa_name(config.level), " is not supported by this CPU; it supports up to ",
                isa_name(best_isa()));
  slot().store(encode(config), std::memory_order_relaxed);
}

std::string_view bf16_conv_compute_name(Bf16ConvCompute mode) {
  return kBf16ConvNames[static_cast<std::size_t>(mode)];
}

}  // namespace mixprec
