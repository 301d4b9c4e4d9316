#pragma once
// What the training commands share to run data-parallel under `mpirun` (docs/DISTRIBUTED.md):
//   - run_on_ranks: the command on every rank of the launch (or alone, exactly as before);
//     ranks started with different options stop at start-up; output comes from rank 0 only;
//     an error on any rank ends every rank (MPI_Abort) with that rank's message, so no rank is
//     left waiting in a collective;
//   - RankTimes: each rank's compute and communication time, printed by rank 0 at the end.
#include <functional>
#include <string>

#include "commands.h"
#include "mixprec/core/communicator.h"
#include "mixprec/core/random.h"
#include "mixprec/core/tensor.h"
#include "mixprec/nn/data_parallel.h"

namespace mixprec::app {

// Runs body(world) in the world of this launch. Alone (no MPI launcher, or one rank) it is just
// body(world). On N > 1 ranks it first checks that every rank got the same arguments (a
// UsageError naming the ranks that differ), then runs the body with the standard output and
// error of ranks other than 0 sent to /dev/null (they would repeat rank 0's lines); a
// UsageError or exception escaping the body on any rank is printed as "mixprec: rank R: ..."
// (on that rank's own stderr) and ends the whole job with status 2 or 1.
int run_on_ranks(const std::string& command, Args args,
                 const std::function<int(const Communicator&)>& body);

// Before a checkpoint of `step`, on every rank: an Error unless every rank's weights hash as
// rank 0's (a replica that diverged is never saved nor averaged into the others).
void check_replicas(const std::string& command, const Communicator& world,
                    const std::vector<Tensor>& params, int64_t step);

// Rank r's share of a global batch (dim 0 cut into equal parts): the r-th part, a view.
Tensor rank_share(const Communicator& world, const Tensor& global_batch);
// Gives `gen` a stream of its own on each rank (for the noise each rank draws for its own
// share; after the draws all ranks share, such as the global batch). Alone: unchanged.
void fork_per_rank(const Communicator& world, Generator& gen);

// This rank's seconds of training and of communication, gathered at the end and printed by rank
// 0 as one line per rank: "rank R: S s of steps, C s computing, E s in all-reduce not hidden
// behind backward (P s packing), B buckets, H% of them started during backward".
void print_rank_times(const std::string& command, const Communicator& world,
                      double step_seconds, const nn::DataParallelTimes& times);

}  // namespace mixprec::app
