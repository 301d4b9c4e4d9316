#pragma once
// PeakNet: Bragg-peak segmentation of X-ray detector panels (issue #13; docs/STREAM.md).
//
//   frame [B, 1, H, W] in ADU -> log(1 + relu(x) / gain): photons on a log scale
//     -> level 0: 2x2 stride-2 conv (patchify) -> ConvNeXt blocks          1/2
//     -> level i: LayerNorm -> 2x2 stride-2 conv -> ConvNeXt blocks        1/2^(i+1)
//     -> decoder, deepest first: 1x1 conv to the next level's width, nearest 2x up, + that
//        level's features (a light U-Net with additive skips), one ConvNeXt block
//     -> 1x1 conv to the stem's width, 2x up, + a 3x3 conv of the input (the full-resolution
//        stem: spots are 1-3 px wide) -> GELU -> 1x1 conv -> logits [B, 2, H, W] (background, peak)
//
// ConvNeXt-V2 block: depthwise 7x7 conv -> LayerNorm over channels -> Linear C -> rC -> GELU
// -> GRN -> Linear rC -> C, plus the input. Features are channels-last ([B, C, H, W] laid out
// NHWC), so the per-pixel part works on the [B, H, W, C] view without a copy.
//
// Dtypes: the network runs in its input's dtype. For bf16 at the source, call
// `model.to(DType::BF16)` (LayerNorm parameters stay f32) and pass bf16 frames: nothing is
// promoted to f32 on the way. H and W must be multiples of 2^levels.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/io/safetensors.h"
#include "mixprec/nn/layers.h"
#include "mixprec/stream/synthetic_frames.h"

namespace mixprec::models {

struct PeakNetConfig {
  std::vector<int64_t> widths = {16, 32, 48};  // channels per level (1/2, 1/4, 1/8 ...)
  std::vector<int64_t> depths = {1, 1, 1};     // ConvNeXt blocks per encoder level
  int64_t stem_channels = 8;                   // the full-resolution features
  int64_t mlp_ratio = 2;                       // a block's hidden width / its width
  int64_t kernel = 7;                          // the depthwise kernel
  double adu_per_photon = 10;                  // the input scale (the detector's gain)
  // The peak rule: a pixel is a peak where its softmax peak probability exceeds `threshold`
  // (0.5: the argmax), and a peak keeps at least `min_pixels` of them, unless its SNR reaches
  // `small_peak_snr` (0: no exception). `stream train` (and `stream calibrate`) choose all three
  // on held-out frames for the best F1: a focal loss leaves pixels of faint spots below 0.5,
  // single stray pixels are most of a net's false peaks, and a sharp strong spot can be marked
  // by one pixel.
  double threshold = 0.5;
  int64_t min_pixels = 1;
  double small_peak_snr = 0;
  int64_t levels() const { return static_cast<int64_t>(widths.size()); }
  void validate() const;  // an Error naming the bad field
};

class ConvNeXtBlock final : public nn::Layer {
 public:
  ConvNeXtBlock(int64_t channels, int64_t mlp_ratio, int64_t kernel, Generator& gen);
  std::string_view type_name() const override { return "ConvNeXtBlock"; }
  Tensor forward(const Tensor& x) override;  // x [B, C, H, W] channels-last -> same

 private:
  std::shared_ptr<nn::Conv2d> depthwise_;
  std::shared_ptr<nn::LayerNorm> norm_;
  std::shared_ptr<nn::Linear> expand_, project_;
  std::shared_ptr<nn::GlobalResponseNorm> grn_;
};

class PeakNet final : public nn::Module {
 public:
  explicit PeakNet(PeakNetConfig config, Generator& gen = default_generator());
  std::string_view type_name() const override { return "PeakNet"; }
  const PeakNetConfig& config() const { return config_; }
  // Multiply-adds of the convolutions and linear layers for one H x W image (the FLOP budget:
  // 2x this per frame; norms and activations are memory traffic, not counted).
  int64_t multiply_adds(int64_t height, int64_t width) const;
  // frames [B, 1, H, W] (ADU, any floating dtype) -> logits [B, 2, H, W] in the same dtype.
  Tensor forward(const Tensor& frames);
  // The peak mask: 1 where the peak probability exceeds config().threshold (the argmax at
  // 0.5), into `mask` (B * H * W bytes). Runs without gradients; a batch on several threads
  // runs a frame per thread.
  void segment(const Tensor& frames, uint8_t* mask);
  // threshold in (0, 1), min_pixels >= 1, small_peak_snr >= 0 (PeakNetConfig).
  void set_peak_rule(double threshold, int64_t min_pixels, double small_peak_snr);

 private:
  struct Level {
    std::shared_ptr<nn::LayerNorm> norm;  // before the downsampling conv (not on level 0)
    std::shared_ptr<nn::Conv2d> down;
    std::vector<std::shared_ptr<ConvNeXtBlock>> blocks;
    std::shared_ptr<nn::Conv2d> lateral;  // decoder: from the level below's width (not the deepest)
    std::shared_ptr<ConvNeXtBlock> decode;
  };
  PeakNetConfig config_;
  std::shared_ptr<nn::Conv2d> stem_, to_stem_, head_;
  std::vector<Level> levels_;
};

// 1 where the peak probability of two-class logits [B, 2, H, W] (any float dtype) exceeds
// `threshold` (0.5: the argmax; a tie is background), into `mask` (B * H * W bytes).
void peak_mask(const Tensor& logits, double threshold, uint8_t* mask);

// The focal loss (Lin et al., RetinaNet) of two-class logits [B, 2, H, W] against a 0/1 target
// [B, H, W]: per pixel -a_t (1 - p_t)^gamma log p_t, with p_t the probability of the true class
// and a_t = alpha for a peak pixel, 1 - alpha for background; summed over the pixels whose
// `weight` [B, H, W] is nonzero (scaled by it; undefined: all pixels) and divided by the number
// of weighted peak pixels (at least 1): rare positives, each worth the same whatever the frame.
// Computed in f32 (f64 for f64 logits); differentiable in the logits.
struct FocalLossOptions {
  double alpha = 0.75;
  double gamma = 2;
};
Tensor focal_loss(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                  const FocalLossOptions& options = {});

// Training labels from a synthetic frame's true peaks, each (P, H, W): target 1 within
// `reach_sigma` sigma of a spot with SNR >= min_snr; weight 0 (don't care) around weaker spots
// (they are neither required nor wrong to find), 1 elsewhere.
struct PeakLabelOptions {
  double reach_sigma = 1.5;
  double min_snr = 5;
};
void peak_labels(const stream::SyntheticFrame& frame, const stream::DetectorGeometry& geometry,
                 float* target, float* weight, const PeakLabelOptions& options = {});

// A trained PeakNet on disk: its weights (in their own dtype) and its configuration in the
// safetensors metadata ("format": "mixprec.peaknet", "peaknet.<field>"), plus the caller's own.
void save_peaknet(const std::string& path, const PeakNet& model,
                  const io::SafetensorsMetadata& extra = {});
// Rebuilds the network a file describes and loads its weights (f32 parameters, converted
// exactly); `extra` receives the caller's metadata. Errors name the file and the problem.
std::unique_ptr<PeakNet> load_peaknet(const std::string& path,
                                      io::SafetensorsMetadata* extra = nullptr);
// The configuration fields as metadata ("peaknet.widths": "16,32,48", ...) and back.
io::SafetensorsMetadata peaknet_metadata(const PeakNetConfig& config);
PeakNetConfig peaknet_config(const io::SafetensorsMetadata& metadata, const std::string& path);

}  // namespace mixprec::models
