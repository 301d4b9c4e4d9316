// The video model loader is as strict about dtypes as load_checkpoint: a float weight may come
// in any floating dtype (converted exactly / round to nearest even), but an integer or bool
// tensor in its place is a wrong file, refused with the tensor's name, before any weight moves.
#include <gtest/gtest.h>

#include <filesystem>

#include "mixprec/io/safetensors.h"
#include "mixprec/models/video_model_file.h"
#include "support/error_of.h"

namespace mixprec::models {
namespace {

UNetVideoConfig tiny_config() {
  UNetVideoConfig c;
  c.name = "tiny";
  c.base_channels = 16;
  c.channel_mults = {1, 2};
  c.res_blocks = 1;
  c.head_dim = 32;
  c.groups = 4;
  return c;
}

TEST(VideoModelFile, AnIntegerOrBoolTensorWhereAFloatWeightBelongsIsRefused) {
  Generator gen(3);
  UNetVideo net(tiny_config(), gen);
  const std::string path =
      (std::filesystem::temp_directory_path() / "mixprec_video_dtypes.safetensors").string();
  for (DType wrong : {DType::I64, DType::Bool}) {
    save_video_model(path, net, {.config = tiny_config(), .extra = {}});
    const io::SafetensorsMetadata meta = io::SafetensorsFile::open(path).metadata();
    io::NamedTensors tensors = io::load_safetensors(path);
    const std::string victim = tensors.front().first;
    tensors.front().second = Tensor::zeros(tensors.front().second.shape(), wrong);
    io::save_safetensors(path, tensors, meta);
    const std::string error = test_support::error_of([&] { load_video_model(path, nullptr); });
    EXPECT_NE(error.find(victim), std::string::npos) << error;
    EXPECT_NE(error.find(std::string(dtype_name(wrong))), std::string::npos) << error;
  }
  // Another floating dtype is a conversion, not an error.
  save_video_model(path, net, {.config = tiny_config(), .extra = {}});
  const io::SafetensorsMetadata meta = io::SafetensorsFile::open(path).metadata();
  io::NamedTensors tensors = io::load_safetensors(path);
  for (auto& [name, t] : tensors)
    if (is_floating(t.dtype())) t = t.to(DType::BF16);
  io::save_safetensors(path, tensors, meta);
  EXPECT_NO_THROW(load_video_model(path, nullptr));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace mixprec::models
