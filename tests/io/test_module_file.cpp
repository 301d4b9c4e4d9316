// A module's state dict through a safetensors file (io/module_file.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mixprec/core/error.h"
#include "mixprec/core/random.h"
#include "mixprec/io/module_file.h"
#include "mixprec/nn/layers.h"

namespace mixprec::io {
namespace {

TEST(ModuleFile, SafetensorsRoundTripAndDtypeConversion) {
  Generator g1(31), g2(32);
  nn::Linear a(5, 3, true, g1), b(5, 3, true, g2);
  const std::string path = ::testing::TempDir() + "mixprec_linear.safetensors";
  save_module(a, path, {{"note", "test"}});
  load_module(b, path);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(b.weight().value({i, 4}), a.weight().value({i, 4}));
  // f32 file into a bf16 model rounds to nearest even; bf16 back into f32 is exact.
  nn::Linear half(5, 3, true, g2);
  half.to(DType::BF16);
  load_module(half, path);
  EXPECT_EQ(half.weight().value({1, 2}), double(float(BFloat16(float(a.weight().value({1, 2}))))));
  const std::string half_path = ::testing::TempDir() + "mixprec_linear_bf16.safetensors";
  save_module(half, half_path);
  nn::Linear wide(5, 3, true, g1);
  load_module(wide, half_path);
  EXPECT_EQ(wide.weight().dtype(), DType::F32);
  EXPECT_EQ(wide.weight().value({1, 2}), half.weight().value({1, 2}));
  nn::Linear other(4, 3, true, g1);
  EXPECT_THROW(load_module(other, path), Error) << "shape mismatch";
  std::remove(path.c_str());
  std::remove(half_path.c_str());
}

}  // namespace
}  // namespace mixprec::io
