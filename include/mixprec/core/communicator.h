#pragma once
// Processes that train together: the MPI world of an `mpirun` launch, or a world of one.
//
// MPI is optional (found by CMake, MIXPREC_MPI; only src/core/communicator.cpp sees <mpi.h>).
// A Communicator is the RAII owner of MPI in this process: it initializes MPI when the process
// was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx) and finalizes it when it
// goes; launched any other way it is a world of one, every collective is the identity and MPI
// is never touched, so a plain `mixprec train gpt` is exactly what it was before MPI.
// A build without MPI started by a launcher with more than one rank is an Error: N copies of one
// process would each train alone and overwrite each other's checkpoints.
//
// Collectives are what a data-parallel trainer needs and nothing else: the sum of f32 buffers
// (blocking, or started now and waited for later so it runs behind backward), the maximum of a
// flag (do all ranks agree? did any rank overflow?), a broadcast of raw bytes from a root,
// a barrier. Every rank must call the same collectives in the same order (MPI's rule).
//
// Failures: MPI's default error handler (MPI_ERRORS_ARE_FATAL) stays in place, so a failing MPI
// call ends the job with MPI's own message instead of returning an error code; a rank that dies
// makes mpirun stop the others. abort() ends every rank from one of them (a rank that failed on
// its own, while the others may wait in a collective that will never complete).
// Only one Communicator may exist at a time, and MPI cannot be initialized twice in a process.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace mixprec {

class Communicator {
 public:
  // Joins the launcher's world (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that made
  // the Communicator calls MPI), or is a world of one when not launched by MPI.
  Communicator();
  ~Communicator();  // MPI_Finalize when it initialized MPI
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Whether this build can run on several ranks (MPI found at configure time).
  static bool mpi_built();
  // Ranks the launcher says this job has (environment of mpirun/mpiexec/srun); 1 when not
  // launched by one. Read before MPI is initialized.
  static int launched_ranks();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }

  // In place: every rank's buffer becomes the element-wise sum over ranks (f32 arithmetic).
  void all_reduce_sum(std::span<float> buffer) const;
  // The sum of one number over ranks (a loss, a count).
  double all_reduce_sum(double value) const;
  // True on every rank when `flag` is true on any rank (a max all-reduce).
  bool any(bool flag) const;
  // root's `bytes` bytes at `data` are copied into every other rank's `data`.
  void broadcast(void* data, std::size_t bytes, int root = 0) const;
  void barrier() const;

  // A sum all-reduce started now (MPI_Iallreduce) and completed by wait(); the buffer must stay
  // alive and untouched until then. test() lets MPI progress it (most MPI libraries move data
  // only inside MPI calls) and says whether it is done. Destroying a pending request waits.
  class Request {
   public:
    Request();
    Request(Request&&) noexcept;
    Request& operator=(Request&&) noexcept;
    ~Request();
    bool pending() const;
    bool test();
    void wait();

   private:
    friend class Communicator;
    struct State;
    std::unique_ptr<State> state_;
  };
  Request start_all_reduce_sum(std::span<float> buffer) const;

  // Ends every rank of the job with `status` (MPI_Abort); in a world of one, std::exit.
  [[noreturn]] void abort(int status) const;

 private:
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace mixprec
