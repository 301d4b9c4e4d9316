#include "mixprec/core/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "mixprec/core/error.h"

#ifdef MIXPREC_HAVE_MPI
#include <mpi.h>
#endif

namespace mixprec {
namespace {

// The rank count each launcher family puts in its ranks' environment: Open MPI's mpirun,
// MPICH/Intel MPI's Hydra and Slurm's srun --mpi=pmi2 (PMI), MVAPICH.
constexpr const char* kLaunchedSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                   "MV2_COMM_WORLD_SIZE"};

bool g_alive = false;  // one Communicator at a time

#ifdef MIXPREC_HAVE_MPI
int mpi_count(std::size_t n) {
  MIXPREC_CHECK(n <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
                "[Communicator] a message of ", n, " elements is more than MPI's int count");
  return static_cast<int>(n);
}
#endif

}  // namespace

bool Communicator::mpi_built() {
#ifdef MIXPREC_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int Communicator::launched_ranks() {
  for (const char* name : kLaunchedSizeVariables)
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      const int n = std::atoi(value);
      return n > 1 ? n : 1;
    }
  return 1;
}

Communicator::Communicator() {
  MIXPREC_CHECK(!g_alive, "[Communicator] one already exists in this process");
  const int launched = launched_ranks();
  if (launched > 1) {
#ifdef MIXPREC_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    MIXPREC_CHECK(!finalized, "[Communicator] MPI was finalized already in this process");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns_mpi_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
#else
    MIXPREC_CHECK(false, "this mixprec was built without MPI, but was started as one of ", launched,
                  " ranks (mpirun -np ", launched,
                  "): each would train alone. Install an MPI (apt-get install libopenmpi-dev) and "
                  "rebuild, or run one process");
#endif
  }
  g_alive = true;
}

Communicator::~Communicator() {
#ifdef MIXPREC_HAVE_MPI
  if (owns_mpi_) MPI_Finalize();
#endif
  g_alive = false;
}

void Communicator::all_reduce_sum(std::span<float> buffer) const {
  if (!distributed() || buffer.empty()) return;
#ifdef MIXPREC_HAVE_MPI
  MPI_Allreduce(MPI_IN_PLACE, buffer.data(), mpi_count(buffer.size()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
#endif
}

double Communicator::all_reduce_sum(double value) const {
#ifdef MIXPREC_HAVE_MPI
  if (distributed())
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
  return value;
}

bool Communicator::any(bool flag) const {
  int value = flag ? 1 : 0;
#ifdef MIXPREC_HAVE_MPI
  if (distributed()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#endif
  return value != 0;
}

void Communicator::broadcast(void* data, std::size_t bytes, int root) const {
  MIXPREC_CHECK(root >= 0 && root < size_, "[Communicator] broadcast from rank ", root,
                " in a world of ", size_);
  if (!distributed() || bytes == 0) return;
#ifdef MIXPREC_HAVE_MPI
  MPI_Bcast(data, mpi_count(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
#else
  (void)data;  // a world of one has returned above
#endif
}

void Communicator::barrier() const {
#ifdef MIXPREC_HAVE_MPI
  if (distributed()) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

void Communicator::abort(int status) const {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef MIXPREC_HAVE_MPI
  if (distributed()) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  std::exit(status);
}

// ---- non-blocking all-reduce ------------------------------------------------------------------

struct Communicator::Request::State {
#ifdef MIXPREC_HAVE_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif
};

Communicator::Request::Request() = default;
Communicator::Request::Request(Request&&) noexcept = default;
Communicator::Request& Communicator::Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    wait();
    state_ = std::move(other.state_);
  }
  return *this;
}
Communicator::Request::~Request() { wait(); }

bool Communicator::Request::pending() const {
#ifdef MIXPREC_HAVE_MPI
  return state_ != nullptr && state_->request != MPI_REQUEST_NULL;
#else
  return false;
#endif
}

bool Communicator::Request::test() {
#ifdef MIXPREC_HAVE_MPI
  if (pending()) {
    int done = 0;
    MPI_Test(&state_->request, &done, MPI_STATUS_IGNORE);  // sets it to MPI_REQUEST_NULL when done
  }
#endif
  return !pending();
}

void Communicator::Request::wait() {
#ifdef MIXPREC_HAVE_MPI
  if (pending()) MPI_Wait(&state_->request, MPI_STATUS_IGNORE);
#endif
}

Communicator::Request Communicator::start_all_reduce_sum(std::span<float> buffer) const {
  Request r;
  if (!distributed() || buffer.empty()) return r;
#ifdef MIXPREC_HAVE_MPI
  r.state_ = std::make_unique<Request::State>();
  MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), mpi_count(buffer.size()), MPI_FLOAT, MPI_SUM,
                 MPI_COMM_WORLD, &r.state_->request);
#endif
  return r;
}

}  // namespace mixprec
