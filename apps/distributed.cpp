#include "distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::app {
namespace {

// While alive on a rank other than 0: stdout and stderr go to /dev/null, and `error()` is the
// rank's real stderr, for the one message that must get out. Restored on destruction.
class RootOnlyOutput {
 public:
  explicit RootOnlyOutput(bool silence) {
    if (!silence) return;
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = ::dup(STDOUT_FILENO);
    saved_err_ = ::dup(STDERR_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      ::close(null);
    }
  }
  ~RootOnlyOutput() {
    if (saved_err_ < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    ::dup2(saved_out_, STDOUT_FILENO);
    ::dup2(saved_err_, STDERR_FILENO);
    ::close(saved_out_);
    ::close(saved_err_);
  }
  RootOnlyOutput(const RootOnlyOutput&) = delete;
  RootOnlyOutput& operator=(const RootOnlyOutput&) = delete;

  void error(const std::string& line) const {
    const std::string text = line + "\n";
    if (saved_err_ < 0) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    } else if (::write(saved_err_, text.data(), text.size()) < 0) {
      // Nowhere left to report to; MPI_Abort still says which rank ended the job.
    }
  }

 private:
  int saved_out_ = -1, saved_err_ = -1;
};

// A rank's arguments are rank 0's, else a UsageError (all ranks agree before any throws).
void check_same_arguments(const std::string& command, const Communicator& world, Args args) {
  std::string joined;
  for (const std::string_view a : args) {
    joined += a;
    joined += '\0';
  }
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char c : joined) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  uint64_t root_hash = hash;
  world.broadcast(&root_hash, sizeof root_hash);
  const bool differs = root_hash != hash;
  std::vector<float> which(static_cast<std::size_t>(world.size()), 0.0f);
  which[static_cast<std::size_t>(world.rank())] = differs ? 1.0f : 0.0f;
  world.all_reduce_sum(which);
  std::string ranks;
  for (std::size_t r = 0; r < which.size(); ++r)
    if (which[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw UsageError{command + ": the ranks were started with different options (" +
                     (ranks.find(',') != std::string::npos ? "ranks " + ranks + " differ"
                                                           : "rank " + ranks + " differs") +
                     " from rank 0): every rank of an mpirun must get the same command line"};
}

}  // namespace

int run_on_ranks(const std::string& command, Args args,
                 const std::function<int(const Communicator&)>& body) {
  const Communicator world;
  if (!world.distributed()) return body(world);
  const std::string rank = "mixprec: rank " + std::to_string(world.rank()) + " of " +
                           std::to_string(world.size()) + ": ";
  // Errors are answered by MPI_Abort: the other ranks may be waiting in a collective this rank
  // will never join, and only ending the job frees them.
  try {
    check_same_arguments(command, world, args);
  } catch (const UsageError& e) {
    // Every rank is here (they agreed on who differs); none aborts before rank 0 has said why,
    // or the job could end with the message unwritten.
    if (world.is_root()) std::fprintf(stderr, "%s%s\n", rank.c_str(), e.message.c_str());
    world.barrier();
    world.abort(2);
  }
  const RootOnlyOutput output(!world.is_root());
  try {
    return body(world);
  } catch (const UsageError& e) {
    output.error(rank + e.message);
    world.abort(2);
  } catch (const std::exception& e) {
    output.error(rank + "error: " + e.what());
    world.abort(1);
  }
}

void check_replicas(const std::string& command, const Communicator& world,
                    const std::vector<Tensor>& params, int64_t step) {
  if (world.distributed() && !nn::replicas_agree(world, params))
    throw Error(command + ": at step " + std::to_string(step) +
                " the ranks' weights differ: a replica diverged (no checkpoint written)");
}

Tensor rank_share(const Communicator& world, const Tensor& global_batch) {
  if (!world.distributed()) return global_batch;
  const int64_t share = global_batch.size(0) / world.size();
  return global_batch.narrow(0, share * world.rank(), share);
}

void fork_per_rank(const Communicator& world, Generator& gen) {
  if (!world.distributed()) return;
  const GeneratorState s = gen.state();
  gen.set_state({s.seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(world.rank() + 1)),
                 s.offset});
}

void print_rank_times(const std::string& command, const Communicator& world,
                      double step_seconds, const nn::DataParallelTimes& times) {
  constexpr std::size_t kFields = 6;
  std::vector<float> all(static_cast<std::size_t>(world.size()) * kFields, 0.0f);
  float* mine = all.data() + static_cast<std::size_t>(world.rank()) * kFields;
  mine[0] = static_cast<float>(step_seconds);
  mine[1] = static_cast<float>(times.exposed);
  mine[2] = static_cast<float>(times.packing);
  mine[3] = static_cast<float>(times.buckets);
  mine[4] = static_cast<float>(times.buckets_in_backward);
  mine[5] = static_cast<float>(times.reductions);
  world.all_reduce_sum(all);
  if (!world.is_root()) return;
  for (int r = 0; r < world.size(); ++r) {
    const float* t = all.data() + static_cast<std::size_t>(r) * kFields;
    const double computing = t[0] - t[1] - t[2];
    std::fprintf(stderr,
                 "%s: rank %d: %.2f s of steps, %.2f s computing, %.3f s in all-reduce not "
                 "hidden behind backward (%.3f s packing), %.0f buckets in %.0f reductions, "
                 "%.0f%% started during backward\n",
                 command.c_str(), r, t[0], computing, t[1], t[2], t[3], t[5],
                 t[3] > 0 ? 100.0 * t[4] / t[3] : 0.0);
  }
}

}  // namespace mixprec::app
