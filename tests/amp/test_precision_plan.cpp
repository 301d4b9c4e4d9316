#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "mixprec/amp/precision_config.h"
#include "mixprec/amp/precision_plan.h"
#include "support/error_of.h"

namespace mixprec::amp {
namespace {

using test_support::error_of;

PrecisionPlan parse(const std::string& text) { return parse_precision_plan(text, "p.json"); }
std::string error_parsing(const std::string& text) {
  return error_of([&] { parse(text); });
}

TEST(PrecisionPlan, ParsesWhatAppliesAndWhatWasMeasured) {
  const PrecisionPlan p = parse(
      R"({"model": "gpt", "budget": 0.01, "layers": [
           {"name": "h.0", "dtype": "bf16", "error_bf16": 0.004, "error_f16": 0.0005,
            "grad_error_bf16": 0.006, "grad_error_f16": 0.0007, "time_share": 0.2},
           {"name": "h.1", "dtype": "f32", "time_saved_bf16": -0.03},
           {"name": "h.10", "dtype": "float16"}]})");
  EXPECT_EQ(p.model, "gpt");
  EXPECT_EQ(p.budget, 0.01);
  ASSERT_EQ(p.layers.size(), 3u);
  EXPECT_EQ(p.layers[0].dtype, DType::BF16);
  EXPECT_EQ(p.layers[0].time_share, 0.2);
  EXPECT_TRUE(std::isnan(p.layers[1].error_bf16));
  EXPECT_EQ(p.layers[2].dtype, DType::F16);
  EXPECT_EQ(p.setting(), "h.0=bf16,h.1=f32,h.10=f16");
  // to_json reads back as the same plan.
  const PrecisionPlan again = parse(to_json(p));
  EXPECT_EQ(again.setting(), p.setting());
  EXPECT_EQ(again.layers[0].error_f16, 0.0005);
  EXPECT_EQ(again.layers[0].grad_error_bf16, 0.006);
  EXPECT_TRUE(std::isnan(again.layers[1].time_share));
  EXPECT_EQ(again.layers[1].time_saved_bf16, -0.03);  // a conversion can cost more than it saves
  EXPECT_TRUE(std::isnan(again.layers[0].time_saved_bf16));
}

TEST(PrecisionPlan, BadInputIsAClearError) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "p.json"},
      {"[1]", "expected a JSON object"},
      {R"({"model": "gpt"})", "no 'layers'"},
      {R"({"layers": {}})", "'layers' must be an array"},
      {R"({"layers": [], "extra": 1})", "unknown key 'extra'"},
      {R"({"layers": [3]})", "layer 0 must be an object"},
      {R"({"layers": [{"dtype": "bf16"}]})", "'name' must be"},
      {R"({"layers": [{"name": "", "dtype": "bf16"}]})", "'name' must be"},
      {R"({"layers": [{"name": "h.0"}]})", "'dtype' must be a string"},
      {R"({"layers": [{"name": "h.0", "dtype": "fp8"}]})", "dtype 'fp8' is not one a plan can run"},
      {R"({"layers": [{"name": "h.0", "dtype": "f64"}]})", "dtype 'f64' is not one a plan can run"},
      {R"({"layers": [{"name": "h.0", "dtype": "i32"}]})", "dtype 'i32'"},
      {R"({"layers": [{"name": "h.0", "dtype": "bf16", "dtpye": "f16"}]})", "unknown key 'dtpye'"},
      {R"({"layers": [{"name": "h.0", "dtype": "bf16", "time_share": "10%"}]})",
       "'time_share' must be a number"},
      {R"({"layers": [{"name": "h.0", "dtype": "bf16"}, {"name": "h.0", "dtype": "f16"}]})",
       "overlap"},
      {R"({"layers": [{"name": "h.0", "dtype": "bf16"}, {"name": "h.0.attn", "dtype": "f16"}]})",
       "overlap"},
      {R"({"budget": "small", "layers": []})", "'budget' must be a number"},
  };
  for (const auto& c : cases) {
    const std::string e = error_parsing(c.text);
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << " -> " << e;
    EXPECT_NE(e.find("p.json"), std::string::npos) << e;
  }
  // "h.1" and "h.10" do not overlap.
  EXPECT_EQ(
      parse(R"({"layers": [{"name": "h.1", "dtype": "bf16"}, {"name": "h.10", "dtype": "f16"}]})")
          .layers.size(),
      2u);
}

TEST(PrecisionPlan, TheCheapestDtypeWithinTheBudget) {
  EXPECT_EQ(choose_layer_dtype(0.004, 0.0005, 0.01), DType::BF16);  // both: bf16 (range)
  EXPECT_EQ(choose_layer_dtype(0.02, 0.0005, 0.01), DType::F16);    // only f16
  EXPECT_EQ(choose_layer_dtype(0.02, 0.011, 0.01), DType::F32);     // neither
  EXPECT_EQ(choose_layer_dtype(0.01, 0.02, 0.01), DType::BF16);     // the budget is inclusive
  EXPECT_EQ(choose_layer_dtype(NAN, NAN, 1.0), DType::F32);
  EXPECT_EQ(choose_layer_dtype(0.0, 0.0, 0.0), DType::BF16);
}

TEST(PrecisionPlan, PrecisionPlanFileIsAConfig) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mixprec_plan_" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(path) << R"({"layers": [{"name": "h.0", "dtype": "bf16"}]})";
  const PrecisionConfig c = PrecisionConfig::parse("plan:" + path);
  std::filesystem::remove(path);
  ASSERT_TRUE(c.plan);
  EXPECT_EQ(c.name(), "plan:h.0=bf16");
  EXPECT_FALSE(c.autocast());
  EXPECT_FALSE(c.half_params());
  EXPECT_FALSE(c.scaler_options().enabled);
  EXPECT_NE(error_of([&] { PrecisionConfig::parse("plan:" + path); }).find("cannot open"),
            std::string::npos);
  EXPECT_NE(error_of([] { PrecisionConfig::parse("fp8"); }).find("|plan:FILE"), std::string::npos);
  // A module planned in f16 computes in f16, so its gradients need the loss scaled.
  std::ofstream(path)
      << R"({"layers": [{"name": "h.0", "dtype": "bf16"}, {"name": "h.1", "dtype": "f16"}]})";
  const PrecisionConfig f16 = PrecisionConfig::parse("plan:" + path);
  std::filesystem::remove(path);
  EXPECT_TRUE(f16.scaler_options().enabled);
  EXPECT_TRUE(f16.scaler_options().dynamic);
}

}  // namespace
}  // namespace mixprec::amp
