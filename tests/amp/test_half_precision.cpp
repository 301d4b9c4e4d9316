// True half-precision inference (seed document 003's finding): converting the weights and making
// the input in 16 bits at the source halves parameter bytes exactly and at least halves the
// forward's peak memory, while autocast over an f32 model saves much less (it keeps f32 weights
// and an f32 input, makes the casts, and its norms write f32).
#include <gtest/gtest.h>

#include <memory>

#include "mixprec/core/allocator.h"
#include "mixprec/mode/autocast.h"
#include "mixprec/mode/grad_mode.h"
#include "mixprec/nn/layers.h"

namespace mixprec::amp {
namespace {

std::shared_ptr<nn::Sequential> conv_net(Generator& gen) {
  using kernels::Activation;
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(32, 64, 3, Conv2dParams{.padding = 1}, true, gen));
  net->push_back(std::make_shared<nn::GroupNorm>(8, 64, 1e-5, Activation::SiLU));
  net->push_back(std::make_shared<nn::Conv2d>(64, 64, 3, Conv2dParams{.padding = 1}, true, gen));
  net->push_back(std::make_shared<nn::GroupNorm>(8, 64, 1e-5, Activation::SiLU));
  net->push_back(std::make_shared<nn::Conv2d>(64, 32, 3, Conv2dParams{.padding = 1}, true, gen));
  net->to(MemoryFormat::ChannelsLast);
  return net;
}

std::size_t parameter_bytes(const nn::Module& m, bool norms) {
  std::size_t bytes = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const bool is_norm = name.rfind("1.", 0) == 0 || name.rfind("3.", 0) == 0;
    if (is_norm == norms) bytes += p.nbytes();
  }
  return bytes;
}

// Peak bytes allocated above what was live before the forward (activations and casts).
std::size_t forward_peak(nn::Sequential& net, const std::function<Tensor()>& make_input,
                         bool autocast) {
  CachingAllocator& alloc = CachingAllocator::global();
  InferenceMode inference;
  const std::size_t before = alloc.stats().allocated_bytes;
  alloc.reset_peak();
  {
    Autocast guard(DType::BF16, autocast);
    const Tensor x = make_input();
    const Tensor y = net(x);
    EXPECT_EQ(y.dtype(), autocast ? DType::BF16 : x.dtype());
  }
  return alloc.stats().peak_allocated_bytes - before;
}

TEST(HalfPrecisionInference, HalvesParameterAndActivationMemory) {
  Generator gen(1);
  auto net = conv_net(gen);
  const Shape shape{2, 32, 32, 32};
  const std::size_t weights_f32 = parameter_bytes(*net, false);
  const std::size_t norms_f32 = parameter_bytes(*net, true);
  auto input = [&](DType dtype) {
    return [&, dtype] {
      Generator g(2);
      return Tensor::randn(shape, g, dtype).contiguous(MemoryFormat::ChannelsLast);
    };
  };
  const std::size_t f32_peak = forward_peak(*net, input(DType::F32), false);
  const std::size_t autocast_peak = forward_peak(*net, input(DType::F32), true);

  net->to(DType::BF16);  // true half precision: norms keep f32 parameters
  EXPECT_EQ(parameter_bytes(*net, false) * 2, weights_f32);  // exactly half
  EXPECT_EQ(parameter_bytes(*net, true), norms_f32);
  const std::size_t bf16_peak = forward_peak(*net, input(DType::BF16), false);

  const double bf16_ratio = static_cast<double>(bf16_peak) / static_cast<double>(f32_peak);
  const double autocast_ratio = static_cast<double>(autocast_peak) / static_cast<double>(f32_peak);
  RecordProperty("bf16_activation_ratio", std::to_string(bf16_ratio));
  RecordProperty("autocast_activation_ratio", std::to_string(autocast_ratio));
  EXPECT_LE(bf16_ratio, 0.6) << "f32 " << f32_peak << " B, bf16 " << bf16_peak << " B";
  // Autocast keeps the f32 input, adds its 16-bit copy and the weight casts, and its norms
  // write f32: it needs well over the true half-precision peak (measured 2026-11-23: 0.50x the
  // f32 peak for bf16, 1.24x for autocast).
  EXPECT_GE(static_cast<double>(autocast_peak), 1.5 * static_cast<double>(bf16_peak))
      << "autocast " << autocast_peak << " B, bf16 " << bf16_peak << " B";
}

TEST(HalfPrecisionInference, EveryParameterHalvesWhenNormsAreNotKept) {
  Generator gen(3);
  auto net = conv_net(gen);
  const std::size_t all_f32 = parameter_bytes(*net, false) + parameter_bytes(*net, true);
  net->to(DType::BF16, [](const nn::Module&) { return false; });
  EXPECT_EQ((parameter_bytes(*net, false) + parameter_bytes(*net, true)) * 2, all_f32);
}

}  // namespace
}  // namespace mixprec::amp
