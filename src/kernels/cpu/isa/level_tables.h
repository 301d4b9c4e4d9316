#pragma once
// How a template kernel family is instantiated for an ISA level: one macro per family.
//
// Elementwise, reduce, softmax, loss, norm, norm backward and the attention block steps are
// each written once, as templates over a SIMD lane type S (simd::Scalar, simd::Avx2,
// simd::Avx512, or elementwise_detail::ScalarF64 for the f64 path), in their <family>_impl.h
// (attention: attention_block.h). Their drivers pick a level at run time through accessors
// declared in <family>_kernels.h (attention: attention_internal.h), e.g. norm_avx2().
// MIXPREC_LEVEL_<FAMILY>(level, S) defines those accessors for one level.
//
// The translation units that expand these macros are not in the source tree: the build
// generates one per family and level from the lists in cmake/kernel_levels.cmake
// (<build>/kernel_levels/norm_avx2.cpp: the family's header, the SIMD header, this one and
// MIXPREC_LEVEL_NORM(avx2, simd::Avx2)). Its name gives the unit its level's instruction-set
// flags (cmake/isa_flags.cmake). Everything the impl headers define is in anonymous
// namespaces: no inline copy compiled with -mavx* can stand in for a generic caller.
//
// A new template family: write <family>_impl.h with a constexpr make_<family>_kernels<S>(),
// declare <family>_<level>() in <family>_kernels.h, add a MIXPREC_LEVEL_<FAMILY> macro here
// and the family to MIXPREC_TEMPLATE_FAMILIES in cmake/kernel_levels.cmake. The optimizer
// updates are not here: they are compiled with -ffp-contract=off, in optim/optim_<level>.cpp
// (one line each: the templates of optim_impl.h with HashRandom<S>, S's random bits).

// const Table& <family>_<level>(): the family's table for the level, built at compile time.
#define MIXPREC_LEVEL_TABLE(ns, Table, family, level, ...) \
  namespace mixprec::kernels::ns {                         \
  const Table& family##_##level() {                        \
    static constexpr Table kernels = __VA_ARGS__;          \
    return kernels;                                        \
  }                                                        \
  }

#define MIXPREC_LEVEL_ELEMENTWISE(level, S)                                       \
  MIXPREC_LEVEL_TABLE(elementwise_detail, ElementwiseKernels, elementwise, level, \
                      ElementwiseKernels{&run<S>})
#define MIXPREC_LEVEL_REDUCE(level, S) \
  MIXPREC_LEVEL_TABLE(reduce_detail, ReduceKernels, reduce, level, make_reduce_kernels<S>())
#define MIXPREC_LEVEL_SOFTMAX(level, S) \
  MIXPREC_LEVEL_TABLE(softmax_detail, SoftmaxKernels, softmax, level, make_softmax_kernels<S>())
#define MIXPREC_LEVEL_LOSS(level, S) \
  MIXPREC_LEVEL_TABLE(loss_detail, LossKernels, loss, level, make_loss_kernels<S>())
#define MIXPREC_LEVEL_NORM(level, S) \
  MIXPREC_LEVEL_TABLE(norm_detail, NormKernels, norm, level, make_norm_kernels<S>())
#define MIXPREC_LEVEL_NORM_BACKWARD(level, S)                                           \
  MIXPREC_LEVEL_TABLE(norm_backward_detail, NormBackwardKernels, norm_backward, level, \
                      make_norm_backward_kernels<S>())

// The attention block steps (f32 scores only, so no f64 path).
#define MIXPREC_LEVEL_ATTENTION(level, S)                                                    \
  namespace mixprec::kernels::attention_detail {                                             \
  void block_update_##level(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal,    \
                            float* m, float* l, void* p, DType p_dtype, int64_t ld_p, float* o, \
                            int64_t ld_o, int dv) {                                          \
    block_update<S>(s, ld_s, rows, cols, diagonal, m, l, p, p_dtype, ld_p, o, ld_o, dv);     \
  }                                                                                          \
  void recompute_probs_##level(float* s, int64_t ld_s, int rows, int cols, int64_t diagonal, \
                               const float* lse, void* p_low, DType low, int64_t ld_low) {   \
    recompute_probs<S>(s, ld_s, rows, cols, diagonal, lse, p_low, low, ld_low);              \
  }                                                                                          \
  void softmax_grad_##level(const float* p, int64_t ld_p, const float* dp, int64_t ld_dp,    \
                            int rows, int cols, const float* delta, void* ds, DType ds_dtype, \
                            int64_t ld_ds) {                                                 \
    softmax_grad<S>(p, ld_p, dp, ld_dp, rows, cols, delta, ds, ds_dtype, ld_ds);             \
  }                                                                                          \
  void attend_rows_##level(const AttendRows& a) { attend_rows<S>(a); }                       \
  }
