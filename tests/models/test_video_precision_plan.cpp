// Per-layer precision plans on a UNetVideo (issue #15 item 2): the planner measures every
// top-level module with parameters (norms stay f32 and are not planned), leaves the model as it
// was, lets the budget decide, and its plan converts exactly the modules it names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "gpt_test_util.h"
#include "video_test_util.h"
#include "mixprec/models/video_precision_plan.h"
#include "mixprec/nn/precision.h"

namespace mixprec::models {
namespace {

// A tiny direct residual model (two context frames unless `config` says otherwise) on 16x16
// moving shapes.
struct Planned {
  explicit Planned(const UNetVideoConfig& config = test::tiny_unet(2)) : model(config, gen) {}
  Generator gen{9};
  UNetVideo model;
  VideoModelInfo info{.config = model.config(), .prediction = Prediction::Direct,
                      .residual = true};
  data::MovingShapes data{{.height = 16, .width = 16}, 3};
  amp::PrecisionPlan plan(double budget) {
    return plan_video_precision(model, info, data,
                                {.budget = budget, .clips = 2, .repetitions = 1});
  }
};

TEST(VideoPrecisionPlan, MeasuresEveryModuleAndLeavesTheModelAsItWas) {
  Planned p;
  const nn::NamedTensors before = p.model.state_dict();
  std::vector<Tensor> copies;
  for (const auto& [name, t] : before) copies.push_back(t.clone());
  const amp::PrecisionPlan plan = p.plan(1e-3);
  EXPECT_EQ(plan.model, "video");
  std::vector<std::string> planned, expected;
  for (const amp::PlanLayer& l : plan.layers) planned.push_back(l.name);
  for (const auto& [name, module] : p.model.named_children())
    if (!module->parameters().empty() && !nn::Module::is_norm_layer(*module))
      expected.push_back(name);
  EXPECT_EQ(planned, expected);
  EXPECT_NE(std::find(planned.begin(), planned.end(), "conv_in"), planned.end());
  for (const amp::PlanLayer& l : plan.layers) {
    // bf16 keeps 8 bits, f16 11: the frames and the gradients move more in bf16.
    EXPECT_GT(l.error_bf16, l.error_f16) << l.name;
    EXPECT_GT(l.error_f16, 0) << l.name;
    EXPECT_GT(l.grad_error_bf16, l.grad_error_f16) << l.name;
    EXPECT_LT(l.grad_error_bf16, 0.1) << l.name;
    EXPECT_EQ(l.dtype, amp::choose_layer_dtype(std::max(l.error_bf16, l.grad_error_bf16),
                                               std::max(l.error_f16, l.grad_error_f16), 1e-3));
    EXPECT_TRUE(std::isfinite(l.time_saved_bf16)) << l.name;
    EXPECT_TRUE(std::isnan(l.time_share)) << l.name;
  }
  const nn::NamedTensors after = p.model.state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].second.dtype(), DType::F32) << after[i].first;
    EXPECT_FALSE(after[i].second.grad().defined()) << after[i].first;
    EXPECT_EQ(test::max_abs_diff(after[i].second, copies[i]), 0.0) << after[i].first;
  }
  // The budget decides: 0 keeps every module f32, a loose one stores every module in bf16.
  for (const amp::PlanLayer& l : p.plan(0).layers) EXPECT_EQ(l.dtype, DType::F32) << l.name;
  for (const amp::PlanLayer& l : p.plan(0.5).layers) EXPECT_EQ(l.dtype, DType::BF16) << l.name;
}

// An anchor-map model with a flow input (the shipped video model's kind): its frames are read
// through the map it predicts, and its loss grades the map against the renderer's; every
// module is measured on both, and the model is left as it was.
TEST(VideoPrecisionPlan, PlansAnAnchorMapModel) {
  UNetVideoConfig config = test::tiny_unet(2);
  config.motion = config.anchor_frame = config.anchor_map = config.flow_input = true;
  Planned p(config);
  nn::init::uniform_(test::parameter(p.model, "conv_out.weight"), -0.2, 0.2, p.gen);
  const Tensor conv_in = test::parameter(p.model, "conv_in.weight").clone();
  const amp::PrecisionPlan plan = p.plan(1e-3);
  ASSERT_FALSE(plan.layers.empty());
  for (const amp::PlanLayer& l : plan.layers) {
    EXPECT_GT(l.error_bf16, 0) << l.name;
    EXPECT_LT(l.error_bf16, 0.1) << l.name;
    EXPECT_GT(l.grad_error_bf16, l.grad_error_f16) << l.name;
    EXPECT_LT(l.grad_error_bf16, 0.1) << l.name;
  }
  EXPECT_EQ(test::max_abs_diff(test::parameter(p.model, "conv_in.weight"), conv_in), 0.0);
}

TEST(VideoPrecisionPlan, APlanConvertsTheModulesItNames) {
  Planned p;
  amp::PrecisionConfig c;
  c.plan = std::make_shared<const amp::PrecisionPlan>(p.plan(0.5));
  nn::to_precision(p.model, c);
  for (const auto& [name, module] : p.model.named_children())
    for (const auto& [param, t] : module->named_parameters())
      EXPECT_EQ(t.dtype(), nn::Module::is_norm_layer(*module) || param.find("norm") != std::string::npos
                               ? DType::F32
                               : DType::BF16)
          << name << "." << param;
}

TEST(VideoPrecisionPlan, RefusesAModelThatIsNotF32) {
  Planned p;
  p.model.to(DType::BF16);
  EXPECT_THROW(p.plan(0.01), Error);
}

}  // namespace
}  // namespace mixprec::models
