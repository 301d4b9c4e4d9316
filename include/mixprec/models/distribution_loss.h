#pragma once
// A position-free loss for frame predictors: the sliced Wasserstein distance between the patches
// of a generated frame and those of the true frame (`video train --distribution λ`).
//
// Why: under positional uncertainty a per-pixel loss is lowest for a shape blurred (mse) or
// eroded (l1) over the places it may be, and a stream of such frames fades (docs/VIDEO.md). This
// loss compares what a frame is made of, not where: the distribution of its small patches. A
// crisp shape a pixel off costs nothing; an eroded shape lacks patches of its colour, a blurred
// one has edge patches the data never has, a vanished one lacks both. Each is penalised, and the
// gradient goes where it should: the pixels whose rank says "should be shape colour" are the
// partly eroded rim pixels, which grow back; blurred edge pixels are pushed to one side.
//
// How (Rabin et al. 2011; Heitz et al. 2021 for textures): project every p x p patch (all three
// channels) of a frame onto D random unit directions (a convolution with fixed random filters),
// and per sample and direction compare the sorted projections of the two frames. The sort's
// permutation is locally constant, so the loss is the mean squared distance between each
// generated projection and the true projection of the same rank, a target built without a
// gradient. The first directions look at single pixels (random RGB directions: the colour
// histogram), the rest at whole patches (edges, corners, texture).
#include <cstdint>
#include <vector>

#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"

namespace mixprec::models {

struct SlicedWassersteinOptions {
  int64_t directions = 32;         // random directions per scale, >= 1
  int64_t colour_directions = 8;   // of them, single-pixel colour directions (<= directions)
  int64_t patch = 5;               // patch side in taps, odd, >= 1
  // The scales: the distance between a patch's taps, each >= 1. Taps 2 pixels apart see 9x9
  // pixels: a shape's outline and corners, where taps 1 apart see its edges. The loss is the
  // mean over scales.
  std::vector<int64_t> dilations = {1, 2};
};

// generated and real [B, C, H, W] (any float dtype; real is taken without a gradient; H and W
// at least the widest patch; C may stack several frames, so patches span time) -> f32 scalar:
// mean over samples, directions and patches of the squared distance of each generated
// projection to the real projection of the same rank. Directions are drawn from `gen` (fresh
// ones each call, so the expectation covers every direction). Runs in f32 whatever autocast
// says: ranks of rounded values would tie.
Tensor sliced_wasserstein_loss(const Tensor& generated, const Tensor& real, Generator& gen,
                               const SlicedWassersteinOptions& options = {});

}  // namespace mixprec::models
