// Checkpoints: train, save, train on; load into fresh objects, train on: bit-identical weights,
// master weights, moments and scaler, with stochastic rounding and overflow skips on the way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/amp/grad_scaler.h"
#include "mixprec/core/random.h"
#include "mixprec/io/checkpoint.h"
#include "mixprec/io/module_file.h"
#include "mixprec/nn/clip.h"
#include "mixprec/nn/layers.h"
#include "mixprec/ops/functional.h"
#include "mixprec/optim/adam.h"
#include "mixprec/optim/sgd.h"
#include "optim_test_util.h"
#include "support/error_of.h"

namespace mixprec::io {
namespace {

using test_support::bytes_of;
using test_support::error_of;

// A scratch file path, removed at scope exit.
struct ScratchFile {
  std::string path;
  explicit ScratchFile(const std::string& name) {
    path = (std::filesystem::temp_directory_path() /
            (name + "_" + std::to_string(::getpid()) + ".safetensors"))
               .string();
  }
  ~ScratchFile() { std::filesystem::remove(path); }
};

// A bf16 MLP with AdamW (stochastic rounding) and a dynamic scaler that grows every 3 clean
// steps; the data of step k comes from Generator(1000 + k), so a resumed run sees the same data.
struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  amp::GradScaler scaler{{.init_scale = 256, .growth_interval = 3}};

  explicit Trainer(uint64_t init_seed, optim::AdamWOptions options) {
    Generator gen(init_seed);
    model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Layer>>{
        std::make_shared<nn::Linear>(4, 16, true, gen), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(16, 2, true, gen)});
    model->to(DType::BF16);
    opt = std::make_unique<optim::AdamW>(model->parameters(), options);
  }

  void train(int64_t from, int64_t to) {
    for (int64_t k = from; k < to; ++k) {
      Generator data(1000 + static_cast<uint64_t>(k));
      const Tensor x = Tensor::randn({32, 4}, data, DType::BF16);
      const Tensor y = Tensor::randn({32, 2}, data);
      scaler.scale(mse_loss(model->forward(x), y)).backward();
      if (k % 5 == 4) opt->params()[0].grad().set({0, 0}, INFINITY);  // an overflow to skip
      scaler.unscale(*opt);
      nn::clip_grad_norm(model->parameters(), 1.0);
      scaler.step(*opt);
      scaler.update();
      opt->zero_grad();
    }
  }

  std::vector<std::vector<unsigned char>> everything() const {
    std::vector<std::vector<unsigned char>> out;
    for (const Tensor& p : model->parameters()) out.push_back(bytes_of(p));
    for (const auto& [name, t] : opt->state_dict().tensors) out.push_back(bytes_of(t));
    for (const auto& [key, value] : scaler.state_dict())
      out.push_back(bytes_of(Tensor::scalar(value, DType::F64)));
    return out;
  }
};

const optim::AdamWOptions kOptions{
    .lr = 3e-3, .weight_decay = 0.1, .rounding = optim::Rounding::Stochastic, .seed = 11};

TEST(Checkpoint, ResumeIsBitIdentical) {
  ScratchFile file("mixprec_ckpt_resume");
  Trainer a(1, kOptions);
  a.train(0, 7);
  EXPECT_GE(a.scaler.skipped_steps(), 1) << "the run saw an overflow before the save";
  save_checkpoint(file.path, *a.model, *a.opt, &a.scaler,
                  {{"precision", "bf16"}, {"data_position", "7"}});
  a.train(7, 13);

  Trainer b(2, {.lr = 1.0});  // other weights, options, rounding and seed: all restored
  const SafetensorsMetadata user = load_checkpoint(file.path, *b.model, *b.opt, &b.scaler);
  EXPECT_EQ(user, (SafetensorsMetadata{{"data_position", "7"}, {"precision", "bf16"}}));
  EXPECT_EQ(b.opt->options().lr, kOptions.lr);
  EXPECT_EQ(b.opt->rounding(), optim::Rounding::Stochastic);
  EXPECT_EQ(b.opt->seed(), 11u);
  b.train(std::stoll(user.at("data_position")), 13);

  const auto want = a.everything(), got = b.everything();
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(want[i] == got[i]) << "entry " << i << " differs after the resume";
  EXPECT_EQ(a.scaler.get_scale(), b.scaler.get_scale());
  EXPECT_TRUE(b.opt->master(0).defined());
}

TEST(Checkpoint, FileLayout) {
  ScratchFile file("mixprec_ckpt_layout");
  Trainer a(1, kOptions);
  a.train(0, 2);
  save_checkpoint(file.path, *a.model, *a.opt, &a.scaler, {{"precision", "bf16"}});
  const SafetensorsFile f = SafetensorsFile::open(file.path);
  EXPECT_TRUE(f.contains("model.0.weight"));
  EXPECT_TRUE(f.contains("optim.0.master"));
  EXPECT_TRUE(f.contains("optim.0.exp_avg_sq"));
  EXPECT_EQ(f.info("optim.0.master").dtype, DType::F32);
  EXPECT_EQ(f.info("model.0.weight").dtype, DType::BF16);
  EXPECT_EQ(f.metadata().at("format"), "mixprec.checkpoint");
  EXPECT_EQ(f.metadata().at("mixprec.step"), "2");
  EXPECT_NE(f.metadata().at("mixprec.optimizer").find("\"type\": \"AdamW\", \"seed\": 11"),
            std::string::npos);
  EXPECT_NE(f.metadata().at("mixprec.scaler").find("\"scale\": 256"), std::string::npos);
}

TEST(Checkpoint, BadCheckpointsAreClearErrors) {
  ScratchFile file("mixprec_ckpt_bad"), plain("mixprec_ckpt_plain");
  Trainer a(1, kOptions);
  a.train(0, 1);
  save_checkpoint(file.path, *a.model, *a.opt, nullptr);

  Trainer b(2, kOptions);
  const auto before = b.everything();
  EXPECT_NE(error_of([&] {
              load_checkpoint(file.path, *b.model, *b.opt, &b.scaler);
            }).find("metadata 'mixprec.scaler' is missing"),
            std::string::npos);
  EXPECT_TRUE(b.everything() == before) << "a failed load changes nothing";

  nn::Linear other(4, 3);
  optim::AdamW other_opt(other.parameters());
  EXPECT_NE(
      error_of([&] { load_checkpoint(file.path, other, other_opt); }).find("is not in the model"),
      std::string::npos);

  optim::SGD sgd(b.model->parameters(), {.lr = 0.1});
  EXPECT_NE(error_of([&] {
              load_checkpoint(file.path, *b.model, sgd);
            }).find("the state is for a AdamW optimizer, not SGD"),
            std::string::npos);

  io::save_module(*a.model, plain.path);
  EXPECT_NE(error_of([&] {
              load_checkpoint(plain.path, *b.model, *b.opt);
            }).find("metadata 'format' is missing (not a mixprec checkpoint?)"),
            std::string::npos);

  EXPECT_NE(error_of([&] {
              save_checkpoint(file.path, *a.model, *a.opt, nullptr, {{"mixprec.step", "1"}});
            }).find("is reserved"),
            std::string::npos);
  EXPECT_NO_THROW(load_checkpoint(file.path, *b.model, *b.opt)) << "the old file is intact";
  EXPECT_TRUE(b.everything() != before);
}

}  // namespace
}  // namespace mixprec::io
