#pragma once
// Data-parallel gradients: every rank of a Communicator holds the same parameters, computes the
// gradients of its own shard of a batch, and DataParallel makes each gradient the mean (or sum)
// over ranks, so that every rank's optimizer takes the same step.
//
//   nn::DataParallel dp(world, optimizer.params());
//   nn::broadcast_parameters(world, model.parameters());  // at start: rank 0's weights
//   ...
//   dp.expect_gradients();                // the next backward's gradients are the step's
//   scaler.scale(loss).backward();        // buckets are all-reduced while backward goes on
//   dp.finish();                          // waits; .grad() is now the mean over ranks (f32)
//   scaler.unscale(opt);
//   scaler.agree_found_inf(world);        // any rank overflowed: every rank skips
//   scaler.step(opt); scaler.update();
//
// Buckets: the parameters are cut, in reverse order (backward produces the last layers'
// gradients first), into buckets of about `bucket_mb` megabytes of f32. A post-accumulate hook
// on each parameter (AutogradMeta::post_accumulate_hook) copies its gradient into its bucket as
// soon as backward has finished it; a full bucket starts a non-blocking f32 sum all-reduce
// right away, so communication runs behind the rest of backward. Buckets start strictly in
// order (MPI wants the same collective order on every rank; a bucket that is complete early
// waits for the ones before it). A parameter no gradient reached counts as zeros.
//
// Precision: 16-bit gradients are widened into the f32 buckets and summed in f32; the result
// replaces .grad() as an f32 tensor in the parameter's layout (as GradScaler::unscale does; the
// optimizers and clip_grad_norm read it), so the reduction rounds once, not once per rank.
// Mean multiplies the f32 sum by 1/size (exact for a power of two).
//
// Gradient accumulation: hooks act only after expect_gradients(), so earlier micro-batches
// accumulate locally and only the last backward of a step communicates.
#include <cstdint>
#include <vector>

#include "mixprec/core/communicator.h"
#include "mixprec/core/tensor.h"

namespace mixprec::nn {

enum class GradReduction { Mean, Sum };

struct DataParallelOptions {
  GradReduction reduction = GradReduction::Mean;
  double bucket_mb = 4.0;  // f32 megabytes per bucket (a parameter larger than that is its own)
  bool overlap = true;     // false: every bucket is all-reduced (blocking) in finish()
};

// This rank's time in communication since construction (seconds).
struct DataParallelTimes {
  double packing = 0;  // copying gradients into buckets and the results back (memory work)
  double exposed = 0;  // in MPI calls that block backward or finish(): communication not hidden
  int64_t reductions = 0;         // finish() calls
  int64_t buckets_in_backward = 0;  // buckets started from a hook, before finish()
  int64_t buckets = 0;            // buckets started in all
};

// Copies rank `root`'s parameter values into every rank's (raw bytes, any dtype; contiguous
// parameters). Collective, as are the two below: every rank calls them, in the same order.
void broadcast_parameters(const Communicator& world, const std::vector<Tensor>& params,
                          int root = 0);
// A 64-bit hash (FNV-1a) of the parameters' bytes on this rank.
uint64_t parameter_checksum(const std::vector<Tensor>& params);
// Whether every rank's parameters hash as rank 0's do: replicas that drifted apart (a bug, a
// rank that loaded another checkpoint) are found instead of averaged into nonsense.
bool replicas_agree(const Communicator& world, const std::vector<Tensor>& params);

class DataParallel {
 public:
  // `params`: every trainable parameter, in the same order on every rank (model.parameters()).
  // Installs the hooks; `world` must outlive this object.
  DataParallel(const Communicator& world, std::vector<Tensor> params,
               DataParallelOptions options = {});
  ~DataParallel();  // removes the hooks (waiting for any reduction in flight)
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The next backward produces this step's gradients: its hooks start the buckets.
  void expect_gradients();
  // Starts the buckets no hook started (all of them without overlap), waits for every one and
  // writes the reduced gradients back. Every rank must call it once per expect_gradients().
  void finish();

  const DataParallelTimes& times() const { return times_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  const Communicator& world() const { return world_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    std::vector<int64_t> offsets;     // of each in `buffer` (elements)
    Tensor buffer;  // f32, the bucket's gradients end to end
    std::size_t ready = 0;
    Communicator::Request request;
  };
  void on_gradient_ready(std::size_t param);
  void pack(std::size_t param);
  void start_ready_buckets();
  void start(Bucket& bucket);
  void progress();

  const Communicator& world_;
  std::vector<Tensor> params_;
  DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<bool> packed_;            // per parameter, this step
  std::size_t next_to_start_ = 0;
  bool expecting_ = false;
  DataParallelTimes times_;
};

}  // namespace mixprec::nn
