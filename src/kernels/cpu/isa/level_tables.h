#pragma once
// The one place that instantiates the template kernel families for an ISA level.
//
// Elementwise, reduce, softmax, loss, norm, norm backward and the attention block steps are
// each written once, as templates over a SIMD lane type S (simd::Scalar, simd::Avx2,
// simd::Avx512, or elementwise_detail::ScalarF64 for the f64 path), in their <family>_impl.h
// (attention: attention_block.h). Their front ends pick a level at run time through accessors
// declared in <family>_kernels.h (attention: attention_internal.h), e.g. norm_avx2().
// This header defines those accessors for one level, all families at once; each level is one
// translation unit of this folder, named after the level:
//
//   isa/scalar.cpp   MIXPREC_KERNEL_LEVEL(scalar, simd::Scalar) and the f64 tables
//   isa/avx2.cpp     MIXPREC_KERNEL_LEVEL(avx2, simd::Avx2)
//   isa/avx512.cpp   MIXPREC_KERNEL_LEVEL(avx512, simd::Avx512)
//
// cmake/isa_flags.cmake gives a unit its instruction-set flags by its name (avx2.cpp or
// *_avx2.cpp, and so on), so a level's code is compiled for that level and nothing else is.
// Everything the impl headers define is in anonymous namespaces: no inline copy compiled
// here with -mavx* can stand in for a generic caller.
//
// A new template family: write <family>_impl.h with a constexpr make_<family>_kernels<S>(),
// declare <family>_<level>() in <family>_kernels.h, include the impl header below and add one
// MIXPREC_LEVEL_TABLE line to MIXPREC_LEVEL_TABLES. The optimizer updates are not here: they
// carry their own random-bit generators per level and are compiled with -ffp-contract=off
// (optim/optim_<level>.cpp).
#include <cstdint>

#include "../attention/attention_block.h"
#include "../elementwise/elementwise_impl.h"
#include "../loss/loss_impl.h"
#include "../norm/norm_backward_impl.h"
#include "../norm/norm_impl.h"
#include "../reduce/reduce_impl.h"
#include "../softmax/softmax_impl.h"

// const Table& <family>_<level>(): the family's table for the level, built at compile time.
#define MIXPREC_LEVEL_TABLE(ns, Table, family, level, ...) \
  namespace mixprec::kernels::ns {                         \
  const Table& family##_##level() {                        \
    static constexpr Table kernels = __VA_ARGS__;          \
    return kernels;                                        \
  }                                                        \
  }

// The tables of every family that has an f64 path, for lane type S.
#define MIXPREC_LEVEL_TABLES(level, S)                                                         \
  MIXPREC_LEVEL_TABLE(elementwise_detail, ElementwiseKernels, elementwise, level,              \
                      ElementwiseKernels{&run<S>})                                             \
  MIXPREC_LEVEL_TABLE(reduce_detail, ReduceKernels, reduce, level, make_reduce_kernels<S>())   \
  MIXPREC_LEVEL_TABLE(softmax_detail, SoftmaxKernels, softmax, level, make_softmax_kernels<S>()) \
  MIXPREC_LEVEL_TABLE(loss_detail, LossKernels, loss, level, make_loss_kernels<S>())           \
  MIXPREC_LEVEL_TABLE(norm_detail, NormKernels, norm, level, make_norm_kernels<S>())           \
  MIXPREC_LEVEL_TABLE(norm_backward_detail, NormBackwardKernels, norm_backward, level,         \
                      make_norm_backward_kernels<S>())

// The attention block steps (f32 scores only, so no f64 path).
#define MIXPREC_ATTENTION_LEVEL(level, S)                                                         \
  namespace mixprec::kernels::attention_detail {                                                  \
  void block_update_##level(float* s, int64_t ld_s, int rows, int cols, float* m, float* l,       \
                            void* p, DType p_dtype, int64_t ld_p, float* o, int64_t ld_o,         \
                            int dv) {                                                             \
    block_update<S>(s, ld_s, rows, cols, m, l, p, p_dtype, ld_p, o, ld_o, dv);                    \
  }                                                                                               \
  void recompute_probs_##level(float* s, int64_t ld_s, int rows, int cols, const float* lse) {    \
    recompute_probs<S>(s, ld_s, rows, cols, lse);                                                 \
  }                                                                                               \
  void softmax_grad_##level(const float* p, int64_t ld_p, float* dp, int64_t ld_dp, int rows,     \
                            int cols, const float* delta) {                                       \
    softmax_grad<S>(p, ld_p, dp, ld_dp, rows, cols, delta);                                       \
  }                                                                                               \
  }

// Every template family at one SIMD level.
#define MIXPREC_KERNEL_LEVEL(level, S) \
  MIXPREC_LEVEL_TABLES(level, S)       \
  MIXPREC_ATTENTION_LEVEL(level, S)
