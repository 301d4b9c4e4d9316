#include "mixprec/models/video_critic.h"

#include "mixprec/core/error.h"
#include "mixprec/ops/arith.h"
#include "mixprec/ops/reduce.h"

namespace mixprec::models {

VideoCritic::VideoCritic(int64_t frames, int64_t frame_channels, int64_t width, Generator& gen)
    : frames_(frames), frame_channels_(frame_channels) {
  MIXPREC_CHECK(frames >= 1 && frame_channels >= 1 && width >= 8 && width % 8 == 0,
                "[VideoCritic] needs >= 1 frame of >= 1 channel and a width divisible by 8, got ",
                frames, ", ", frame_channels, ", ", width);
  constexpr int64_t kGroups = 8;
  using nn::Conv2d, nn::GroupNorm;
  const auto silu = kernels::Activation::SiLU;
  // No norm on the first layer (it would erase the clip's own brightness and contrast).
  net_ = register_module(
      "net", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Layer>>{
                 std::make_shared<Conv2d>(frames * frame_channels, width, 3,
                                          Conv2dParams{.padding = 1}, true, gen),
                 std::make_shared<nn::SiLU>(),
                 std::make_shared<Conv2d>(width, 2 * width, 3,
                                          Conv2dParams{.stride = 2, .padding = 1}, true, gen),
                 std::make_shared<GroupNorm>(kGroups, 2 * width, 1e-5, silu),
                 std::make_shared<Conv2d>(2 * width, 4 * width, 3,
                                          Conv2dParams{.stride = 2, .padding = 1}, true, gen),
                 std::make_shared<GroupNorm>(kGroups, 4 * width, 1e-5, silu),
                 std::make_shared<Conv2d>(4 * width, 4 * width, 3,
                                          Conv2dParams{.stride = 2, .padding = 1}, true, gen),
                 std::make_shared<GroupNorm>(kGroups, 4 * width, 1e-5, silu),
                 std::make_shared<Conv2d>(4 * width, 1, 1, Conv2dParams{}, true, gen)}));
}

Tensor VideoCritic::forward(const Tensor& clip) {
  MIXPREC_CHECK(clip.dim() == 4 && clip.size(1) == frames_ * frame_channels_ &&
                    clip.size(2) % 8 == 0 && clip.size(3) % 8 == 0,
                "[VideoCritic] expected a clip [B, ", frames_ * frame_channels_,
                ", H, W] with H and W divisible by 8, got ", shape_to_string(clip.shape()));
  return net_->forward(clip);
}

Tensor critic_hinge_loss(VideoCritic& critic, const Tensor& real, const Tensor& fake) {
  const Tensor on_real = mean(relu(sub(Tensor::scalar(1.0), critic.forward(real).to(DType::F32))));
  const Tensor on_fake = mean(relu(add(critic.forward(fake).to(DType::F32), Tensor::scalar(1.0))));
  return add(on_real, on_fake);
}

Tensor generator_adversarial_loss(VideoCritic& critic, const Tensor& fake) {
  return neg(mean(critic.forward(fake).to(DType::F32)));
}

}  // namespace mixprec::models
